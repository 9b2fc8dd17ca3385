#![doc = include_str!("../README.md")]
#![deny(unsafe_code)]

pub mod cache;
pub mod checkpoints;
pub mod concurrency;
pub mod conversation;
pub mod engine;
pub mod facts;
pub mod filters;
mod harness;
pub mod isolation;
pub mod lifecycle;
pub mod payload;
pub mod services;
pub mod support;
pub mod transfer;
pub mod vectors;
pub mod working_memory;

pub use harness::{
    assert_complete, block_on_scenario, is_required, run_scenario, run_suite, BoxFuture, Ctx,
    Outcome, Requirement, Scenario, ScenarioResult, SetupError,
};

macro_rules! scenario {
    ($group:ident :: $name:ident, $requires:ident) => {
        Scenario {
            name: concat!(stringify!($group), "::", stringify!($name)),
            requires: Requirement::$requires,
            run: |ctx| Box::pin($group::$name(ctx)),
        }
    };
}

/// The canonical list of scenarios: every behaviour a backend must show, with what it needs.
pub static SCENARIOS: &[Scenario] = &[
    scenario!(conversation::create_assigns_uuid_v7_when_no_id_given, None),
    scenario!(conversation::create_keeps_client_id_and_fields, None),
    scenario!(
        conversation::create_duplicate_id_is_already_exists_only_within_scope,
        None
    ),
    scenario!(conversation::get_missing_is_not_found, None),
    scenario!(conversation::list_is_newest_first, None),
    scenario!(
        conversation::list_filters_by_agent_resource_and_record,
        None
    ),
    scenario!(conversation::list_pages_cover_every_conversation_once, None),
    scenario!(
        conversation::list_cursor_is_stable_under_concurrent_inserts,
        None
    ),
    scenario!(
        conversation::list_rejects_malformed_cursor_and_bad_limit,
        None
    ),
    scenario!(conversation::update_changes_title_and_metadata, None),
    scenario!(conversation::update_missing_is_not_found, None),
    scenario!(conversation::delete_reports_whether_it_existed, None),
    scenario!(conversation::append_assigns_contiguous_seq, None),
    scenario!(conversation::append_bumps_updated_at, None),
    scenario!(
        conversation::append_to_missing_conversation_is_not_found,
        None
    ),
    scenario!(conversation::append_empty_batch_changes_nothing, None),
    scenario!(conversation::append_is_idempotent_by_message_id, None),
    scenario!(
        conversation::append_same_id_with_different_content_is_conflict,
        None
    ),
    scenario!(
        conversation::append_handles_repeated_ids_within_a_batch,
        None
    ),
    scenario!(
        conversation::compare_and_append_applies_on_expected_seq,
        None
    ),
    scenario!(
        conversation::compare_and_append_conflict_reports_current_seq,
        None
    ),
    scenario!(
        conversation::compare_and_append_retry_of_applied_batch_succeeds,
        None
    ),
    scenario!(conversation::append_storage_limit_prunes_oldest, None),
    scenario!(conversation::load_returns_messages_as_appended, None),
    scenario!(conversation::load_round_trips_every_part_type, None),
    scenario!(conversation::load_last_n_returns_the_tail, None),
    scenario!(conversation::load_selects_before_and_after_seq, None),
    scenario!(conversation::load_filters_by_role, None),
    scenario!(conversation::load_window_from_long_thread, None),
    scenario!(
        conversation::load_sanitizes_after_crash_between_call_and_result,
        None
    ),
    scenario!(conversation::load_window_drops_orphan_tool_results, None),
    scenario!(conversation::load_missing_is_not_found, None),
    scenario!(conversation::cursor_advances_monotonically, None),
    scenario!(
        concurrency::concurrent_appends_lose_and_duplicate_nothing,
        None
    ),
    scenario!(
        concurrency::concurrent_retries_of_one_batch_apply_once,
        None
    ),
    scenario!(
        concurrency::concurrent_compare_and_append_has_one_winner,
        None
    ),
    scenario!(
        concurrency::concurrent_working_memory_compare_and_set_has_one_winner,
        None
    ),
    scenario!(
        concurrency::concurrent_supersedes_leave_one_current_fact,
        None
    ),
    scenario!(working_memory::get_unset_is_none, None),
    scenario!(working_memory::set_then_get_round_trips, None),
    scenario!(working_memory::set_bumps_revision, None),
    scenario!(
        working_memory::compare_and_set_conflict_reports_current_revision,
        None
    ),
    scenario!(working_memory::compare_and_set_zero_requires_absence, None),
    scenario!(working_memory::clear_removes_and_reports, None),
    scenario!(
        working_memory::user_and_conversation_documents_are_separate,
        None
    ),
    scenario!(
        working_memory::conversation_key_requires_existing_conversation,
        None
    ),
    scenario!(working_memory::json_documents_must_parse, None),
    scenario!(facts::remember_stores_every_field, None),
    scenario!(facts::remember_identical_text_is_a_duplicate, None),
    scenario!(facts::remember_with_key_supersedes_and_keeps_history, None),
    scenario!(facts::history_lists_versions_oldest_first, None),
    scenario!(facts::superseded_facts_are_not_recalled, None),
    scenario!(facts::recall_matches_lexical_definition, None),
    scenario!(facts::recall_orders_by_relevance_score_then_recency, None),
    scenario!(
        facts::recall_ignores_short_tokens_and_splits_on_punctuation,
        None
    ),
    scenario!(facts::recall_is_case_insensitive_over_unicode, None),
    scenario!(facts::recall_respects_limit, None),
    scenario!(facts::recall_filters_by_tags_and_kind, None),
    scenario!(facts::recall_min_score_excludes_low_and_unscored, None),
    scenario!(facts::recall_without_tokens_returns_nothing, None),
    scenario!(facts::expired_facts_are_never_returned, None),
    scenario!(facts::max_facts_evicts_lowest_score_then_oldest, None),
    scenario!(facts::get_missing_fact_is_not_found, None),
    scenario!(facts::list_facts_pages_and_filters, None),
    scenario!(facts::forget_removes_a_fact, None),
    scenario!(facts::remember_rejects_invalid_input, None),
    scenario!(facts::semantic_recall_ranks_by_cosine, Vectors),
    scenario!(facts::hybrid_recall_fuses_ranks, Vectors),
    scenario!(
        facts::expired_facts_neither_dedupe_nor_count_toward_max_facts,
        None
    ),
    scenario!(vectors::ensure_collection_is_idempotent, Vectors),
    scenario!(
        vectors::ensure_collection_with_other_dims_metric_or_model_is_rejected,
        Vectors
    ),
    scenario!(vectors::drop_collection_removes_it_and_its_records, Vectors),
    scenario!(vectors::missing_collection_is_not_found, Vectors),
    scenario!(vectors::upsert_then_get_round_trips, Vectors),
    scenario!(vectors::upsert_replaces_existing_id, Vectors),
    scenario!(
        vectors::upsert_large_batch_keeps_last_of_repeated_id,
        Vectors
    ),
    scenario!(vectors::upsert_rejects_wrong_dimension_atomically, Vectors),
    scenario!(vectors::upsert_rejects_nan_and_infinity, Vectors),
    scenario!(vectors::zero_vector_is_rejected_only_under_cosine, Vectors),
    scenario!(vectors::search_rejects_bad_queries, Vectors),
    scenario!(vectors::exact_top_k_matches_reference_cosine, ExactVectors),
    scenario!(vectors::exact_top_k_matches_reference_dot, ExactVectors),
    scenario!(
        vectors::exact_top_k_matches_reference_euclidean,
        ExactVectors
    ),
    scenario!(
        vectors::approximate_search_reaches_recall_at_10,
        ApproximateVectors
    ),
    scenario!(
        vectors::vector_operations_are_unsupported_without_vector_search,
        NoVectors
    ),
    scenario!(vectors::search_returns_min_of_k_and_matching, Vectors),
    scenario!(
        vectors::filtered_search_fills_k_past_nearer_non_matching,
        Vectors
    ),
    scenario!(vectors::search_min_score_drops_weak_hits, Vectors),
    scenario!(vectors::search_includes_vectors_only_when_asked, Vectors),
    scenario!(vectors::delete_by_ids_reports_count, Vectors),
    scenario!(vectors::delete_by_filter_removes_matching, Vectors),
    scenario!(filters::filter_eq_matches_same_typed_values, Vectors),
    scenario!(filters::filter_ne_matches_missing_and_other_types, Vectors),
    scenario!(filters::filter_in_matches_any_listed_value, Vectors),
    scenario!(filters::filter_range_compares_numbers, Vectors),
    scenario!(
        filters::filter_range_compares_strings_by_code_point,
        Vectors
    ),
    scenario!(filters::filter_exists_counts_null_as_present, Vectors),
    scenario!(filters::filter_boolean_operators_compose, Vectors),
    scenario!(filters::filter_nested_paths, Vectors),
    scenario!(
        filters::filter_never_matches_arrays_or_objects_as_scalars,
        Vectors
    ),
    scenario!(filters::filter_values_are_bound_not_spliced, Vectors),
    scenario!(filters::malformed_filters_are_invalid, Vectors),
    scenario!(checkpoints::put_then_get_round_trips, None),
    scenario!(checkpoints::put_existing_id_is_already_exists, None),
    scenario!(checkpoints::update_with_current_version_bumps_it, None),
    scenario!(checkpoints::update_with_stale_version_is_conflict, None),
    scenario!(checkpoints::concurrent_updates_have_one_winner, None),
    scenario!(
        checkpoints::list_suspended_filters_by_status_and_workflow,
        None
    ),
    scenario!(checkpoints::delete_and_missing_checkpoints, None),
    scenario!(cache::set_then_get_round_trips_bytes, None),
    scenario!(cache::set_replaces_value_and_ttl, None),
    scenario!(cache::ttl_expires_by_store_clock, None),
    scenario!(cache::delete_reports_whether_it_existed, None),
    scenario!(cache::namespaces_do_not_share_entries, None),
    scenario!(cache::invalid_keys_are_rejected, None),
    scenario!(isolation::conversation_of_other_subject_is_not_found, None),
    scenario!(isolation::conversation_lists_are_per_scope, None),
    scenario!(
        isolation::working_memory_of_other_subject_is_invisible,
        None
    ),
    scenario!(isolation::facts_of_other_subject_are_invisible, None),
    scenario!(isolation::supersede_never_crosses_scopes, None),
    scenario!(isolation::vectors_of_other_subject_are_invisible, Vectors),
    scenario!(isolation::checkpoints_of_other_subject_are_invisible, None),
    scenario!(isolation::shared_scope_is_separate_from_subjects, None),
    scenario!(isolation::collections_are_per_namespace, Vectors),
    scenario!(lifecycle::delete_conversation_cascades, None),
    scenario!(lifecycle::forget_all_receipt_counts_every_row, None),
    scenario!(lifecycle::forget_all_leaves_nothing_behind, None),
    scenario!(lifecycle::forget_all_leaves_others_untouched, None),
    scenario!(lifecycle::forget_all_requires_a_subject, None),
    scenario!(transfer::export_then_restore_round_trips_every_record, None),
    scenario!(transfer::restore_twice_is_the_same_as_once, None),
    scenario!(transfer::restore_is_all_or_nothing_and_needs_parents, None),
    scenario!(transfer::scopes_list_exactly_the_owners, None),
    scenario!(transfer::export_leaves_out_expired_records, None),
    scenario!(payload::message_text_round_trips, None),
    scenario!(payload::tool_calls_and_results_round_trip, None),
    scenario!(payload::conversation_fields_round_trip, None),
    scenario!(payload::identifiers_round_trip, None),
    scenario!(payload::fact_fields_round_trip, None),
    scenario!(payload::working_memory_round_trips, None),
    scenario!(payload::vector_payloads_round_trip, Vectors),
    scenario!(payload::checkpoint_state_round_trips, None),
    scenario!(payload::cache_keys_round_trip, None),
    scenario!(payload::one_mebibyte_text_round_trips, None),
    scenario!(
        engine::twenty_turn_conversation_keeps_window_summary_budget_and_facts,
        None
    ),
    scenario!(engine::failing_extractor_leaves_the_turn_committed, None),
    scenario!(
        engine::extraction_honours_threshold_hook_and_namespace,
        None
    ),
    scenario!(engine::injected_facts_cannot_break_the_fence, None),
    scenario!(engine::prepare_and_commit_stay_in_scope, None),
    scenario!(
        engine::auto_conversation_is_one_thread_per_subject_and_agent,
        None
    ),
    scenario!(engine::working_memory_tools_follow_the_schema, None),
    scenario!(
        engine::semantic_recall_merges_older_messages_by_strategy,
        Vectors
    ),
    scenario!(
        engine::knowledge_hits_come_from_sources_above_threshold,
        Vectors
    ),
    scenario!(engine::failing_embedder_leaves_the_turn_committed, Vectors),
    scenario!(engine::cached_embedder_embeds_each_text_once, None),
    scenario!(engine::prompt_cache_handles_are_shared_and_expire, None),
];

/// Emits one test per scenario (each on its own multi-threaded tokio runtime) for a backend factory, plus a completeness test.
///
/// `factory` is an `async fn(Arc<dyn Clock>) -> Result<Arc<dyn MemoryBackend>, SetupError>`;
/// the backend must take "now" from that clock. Tests are grouped in modules by contract
/// (`conversation::append_assigns_contiguous_seq`, …). Scenarios the backend's capabilities
/// exclude, and all of them when its service is unreachable (unless `MEMORY_TEST_REQUIRE` names
/// it), print `SKIP <scenario>: <reason>`.
///
/// ```ignore
/// async fn factory(clock: Arc<dyn Clock>) -> Result<Arc<dyn MemoryBackend>, SetupError> {
///     Ok(Arc::new(InMemoryBackend::with_clock(clock)))
/// }
/// memory_conformance::suite!("memory", factory);
/// ```
#[macro_export]
macro_rules! suite {
    ($backend:literal, $factory:path) => {
        $crate::__suite! { $backend, $factory;
            conversation {
                create_assigns_uuid_v7_when_no_id_given,
                create_keeps_client_id_and_fields,
                create_duplicate_id_is_already_exists_only_within_scope,
                get_missing_is_not_found,
                list_is_newest_first,
                list_filters_by_agent_resource_and_record,
                list_pages_cover_every_conversation_once,
                list_cursor_is_stable_under_concurrent_inserts,
                list_rejects_malformed_cursor_and_bad_limit,
                update_changes_title_and_metadata,
                update_missing_is_not_found,
                delete_reports_whether_it_existed,
                append_assigns_contiguous_seq,
                append_bumps_updated_at,
                append_to_missing_conversation_is_not_found,
                append_empty_batch_changes_nothing,
                append_is_idempotent_by_message_id,
                append_same_id_with_different_content_is_conflict,
                append_handles_repeated_ids_within_a_batch,
                compare_and_append_applies_on_expected_seq,
                compare_and_append_conflict_reports_current_seq,
                compare_and_append_retry_of_applied_batch_succeeds,
                append_storage_limit_prunes_oldest,
                load_returns_messages_as_appended,
                load_round_trips_every_part_type,
                load_last_n_returns_the_tail,
                load_selects_before_and_after_seq,
                load_filters_by_role,
                load_window_from_long_thread,
                load_sanitizes_after_crash_between_call_and_result,
                load_window_drops_orphan_tool_results,
                load_missing_is_not_found,
                cursor_advances_monotonically,
            }
            concurrency {
                concurrent_appends_lose_and_duplicate_nothing,
                concurrent_retries_of_one_batch_apply_once,
                concurrent_compare_and_append_has_one_winner,
                concurrent_working_memory_compare_and_set_has_one_winner,
                concurrent_supersedes_leave_one_current_fact,
            }
            working_memory {
                get_unset_is_none,
                set_then_get_round_trips,
                set_bumps_revision,
                compare_and_set_conflict_reports_current_revision,
                compare_and_set_zero_requires_absence,
                clear_removes_and_reports,
                user_and_conversation_documents_are_separate,
                conversation_key_requires_existing_conversation,
                json_documents_must_parse,
            }
            facts {
                remember_stores_every_field,
                remember_identical_text_is_a_duplicate,
                remember_with_key_supersedes_and_keeps_history,
                history_lists_versions_oldest_first,
                superseded_facts_are_not_recalled,
                recall_matches_lexical_definition,
                recall_orders_by_relevance_score_then_recency,
                recall_ignores_short_tokens_and_splits_on_punctuation,
                recall_is_case_insensitive_over_unicode,
                recall_respects_limit,
                recall_filters_by_tags_and_kind,
                recall_min_score_excludes_low_and_unscored,
                recall_without_tokens_returns_nothing,
                expired_facts_are_never_returned,
                max_facts_evicts_lowest_score_then_oldest,
                get_missing_fact_is_not_found,
                list_facts_pages_and_filters,
                forget_removes_a_fact,
                remember_rejects_invalid_input,
                semantic_recall_ranks_by_cosine,
                hybrid_recall_fuses_ranks,
                expired_facts_neither_dedupe_nor_count_toward_max_facts,
            }
            vectors {
                ensure_collection_is_idempotent,
                ensure_collection_with_other_dims_metric_or_model_is_rejected,
                drop_collection_removes_it_and_its_records,
                missing_collection_is_not_found,
                upsert_then_get_round_trips,
                upsert_replaces_existing_id,
                upsert_large_batch_keeps_last_of_repeated_id,
                upsert_rejects_wrong_dimension_atomically,
                upsert_rejects_nan_and_infinity,
                zero_vector_is_rejected_only_under_cosine,
                search_rejects_bad_queries,
                exact_top_k_matches_reference_cosine,
                exact_top_k_matches_reference_dot,
                exact_top_k_matches_reference_euclidean,
                approximate_search_reaches_recall_at_10,
                vector_operations_are_unsupported_without_vector_search,
                search_returns_min_of_k_and_matching,
                filtered_search_fills_k_past_nearer_non_matching,
                search_min_score_drops_weak_hits,
                search_includes_vectors_only_when_asked,
                delete_by_ids_reports_count,
                delete_by_filter_removes_matching,
            }
            filters {
                filter_eq_matches_same_typed_values,
                filter_ne_matches_missing_and_other_types,
                filter_in_matches_any_listed_value,
                filter_range_compares_numbers,
                filter_range_compares_strings_by_code_point,
                filter_exists_counts_null_as_present,
                filter_boolean_operators_compose,
                filter_nested_paths,
                filter_never_matches_arrays_or_objects_as_scalars,
                filter_values_are_bound_not_spliced,
                malformed_filters_are_invalid,
            }
            checkpoints {
                put_then_get_round_trips,
                put_existing_id_is_already_exists,
                update_with_current_version_bumps_it,
                update_with_stale_version_is_conflict,
                concurrent_updates_have_one_winner,
                list_suspended_filters_by_status_and_workflow,
                delete_and_missing_checkpoints,
            }
            cache {
                set_then_get_round_trips_bytes,
                set_replaces_value_and_ttl,
                ttl_expires_by_store_clock,
                delete_reports_whether_it_existed,
                namespaces_do_not_share_entries,
                invalid_keys_are_rejected,
            }
            isolation {
                conversation_of_other_subject_is_not_found,
                conversation_lists_are_per_scope,
                working_memory_of_other_subject_is_invisible,
                facts_of_other_subject_are_invisible,
                supersede_never_crosses_scopes,
                vectors_of_other_subject_are_invisible,
                checkpoints_of_other_subject_are_invisible,
                shared_scope_is_separate_from_subjects,
                collections_are_per_namespace,
            }
            lifecycle {
                delete_conversation_cascades,
                forget_all_receipt_counts_every_row,
                forget_all_leaves_nothing_behind,
                forget_all_leaves_others_untouched,
                forget_all_requires_a_subject,
            }
            transfer {
                export_then_restore_round_trips_every_record,
                restore_twice_is_the_same_as_once,
                restore_is_all_or_nothing_and_needs_parents,
                scopes_list_exactly_the_owners,
                export_leaves_out_expired_records,
            }
            payload {
                message_text_round_trips,
                tool_calls_and_results_round_trip,
                conversation_fields_round_trip,
                identifiers_round_trip,
                fact_fields_round_trip,
                working_memory_round_trips,
                vector_payloads_round_trip,
                checkpoint_state_round_trips,
                cache_keys_round_trip,
                one_mebibyte_text_round_trips,
            }
            engine {
                twenty_turn_conversation_keeps_window_summary_budget_and_facts,
                failing_extractor_leaves_the_turn_committed,
                extraction_honours_threshold_hook_and_namespace,
                injected_facts_cannot_break_the_fence,
                prepare_and_commit_stay_in_scope,
                auto_conversation_is_one_thread_per_subject_and_agent,
                working_memory_tools_follow_the_schema,
                semantic_recall_merges_older_messages_by_strategy,
                knowledge_hits_come_from_sources_above_threshold,
                failing_embedder_leaves_the_turn_committed,
                cached_embedder_embeds_each_text_once,
                prompt_cache_handles_are_shared_and_expire,
            }
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __suite {
    ($backend:literal, $factory:path; $( $group:ident { $( $name:ident ),* $(,)? } )*) => {
        #[doc(hidden)]
        fn __conformance_factory(
            clock: ::std::sync::Arc<dyn ::memory_core::Clock>,
        ) -> $crate::BoxFuture<'static, ::std::result::Result<::std::sync::Arc<dyn ::memory_core::MemoryBackend>, $crate::SetupError>> {
            ::std::boxed::Box::pin($factory(clock))
        }

        $(
            mod $group {
                $(
                    #[test]
                    fn $name() {
                        $crate::block_on_scenario(
                            $backend,
                            super::__conformance_factory,
                            concat!(stringify!($group), "::", stringify!($name)),
                        );
                    }
                )*
            }
        )*

        #[test]
        fn conformance_suite_is_complete() {
            $crate::assert_complete(&[$($(concat!(stringify!($group), "::", stringify!($name))),*),*]);
        }
    };
}
