#![doc = include_str!("../README.md")]
#![deny(unsafe_code)]

pub mod cache;
pub mod changes;
pub mod checkpoints;
pub mod concurrency;
pub mod conversation;
pub mod differential;
#[cfg(feature = "engine")]
pub mod engine;
pub mod facts;
pub mod filters;
pub mod handles;
mod harness;
pub mod history;
pub mod isolation;
pub mod lifecycle;
#[cfg(feature = "engine")]
pub mod memories;
pub mod payload;
pub mod provenance;
pub mod support;
pub mod transfer;
pub mod vectors;
pub mod working_memory;

pub use harness::{
    block_on_scenario, erase_suite_data, is_required, is_suite_namespace, run_scenario, run_suite,
    skip, BoxFuture, Ctx, Erased, Outcome, Requirement, Scenario, ScenarioResult, SetupError,
};

/// The one list of scenarios, by contract: each scenario's name and the capability it needs.
/// [`SCENARIOS`] and [`suite!`] are both made from it (it calls back the macro it is given
/// with the table), so a scenario is named once, beside its function.
#[doc(hidden)]
#[macro_export]
macro_rules! __with_scenarios {
    ($callback:ident! { $($args:tt)* }) => {
        $crate::__with_engine_scenarios! { $callback! { $($args)*
            conversation {
                create_assigns_uuid_v7_when_no_id_given: None,
                create_keeps_client_id_and_fields: None,
                create_duplicate_id_is_already_exists_only_within_scope: None,
                get_missing_is_not_found: None,
                list_is_newest_first: None,
                list_filters_by_agent_resource_and_record: None,
                list_pages_cover_every_conversation_once: None,
                list_filtered_pages_cross_a_long_tie: None,
                list_cursor_is_stable_under_concurrent_inserts: None,
                list_rejects_malformed_cursor_and_bad_limit: None,
                update_changes_title_and_metadata: None,
                update_missing_is_not_found: None,
                delete_reports_whether_it_existed: None,
                append_assigns_contiguous_seq: None,
                append_bumps_updated_at: None,
                append_to_missing_conversation_is_not_found: None,
                append_empty_batch_changes_nothing: None,
                append_is_idempotent_by_message_id: None,
                append_same_id_with_different_content_is_conflict: None,
                append_handles_repeated_ids_within_a_batch: None,
                compare_and_append_applies_on_expected_seq: None,
                compare_and_append_conflict_reports_current_seq: None,
                compare_and_append_retry_of_applied_batch_succeeds: None,
                append_storage_limit_prunes_oldest: None,
                load_returns_messages_as_appended: None,
                load_returns_numbers_bit_for_bit: None,
                load_round_trips_every_part_type: None,
                load_last_n_returns_the_tail: None,
                load_selects_before_and_after_seq: None,
                load_filters_by_role: None,
                load_window_from_long_thread: None,
                load_sanitizes_after_crash_between_call_and_result: None,
                load_window_drops_orphan_tool_results: None,
                load_missing_is_not_found: None,
                load_seqs_reads_scattered_messages_as_stored: None,
                load_seqs_of_a_missing_conversation_is_not_found: None,
                cursor_advances_monotonically: None,
            }
            concurrency {
                concurrent_appends_lose_and_duplicate_nothing: None,
                concurrent_appends_and_reads_pass_the_history_checker: None,
                concurrent_retries_of_one_batch_apply_once: None,
                concurrent_compare_and_append_has_one_winner: None,
                concurrent_writes_keep_their_own_outcomes: None,
                abandoned_appends_land_whole_or_not_at_all: None,
                concurrent_working_memory_compare_and_set_has_one_winner: None,
                concurrent_supersedes_leave_one_current_fact: None,
                concurrent_supersedes_keep_history_in_supersede_order: None,
                forget_all_counts_messages_appended_concurrently: None,
                concurrent_upserts_never_give_a_hit_of_another_version: Vectors,
                concurrent_collection_makes_and_drops_each_end_as_asked: Vectors,
            }
            working_memory {
                get_unset_is_none: None,
                set_then_get_round_trips: None,
                set_bumps_revision: None,
                compare_and_set_conflict_reports_current_revision: None,
                compare_and_set_zero_requires_absence: None,
                clear_removes_and_reports: None,
                user_and_conversation_documents_are_separate: None,
                conversation_key_requires_existing_conversation: None,
                json_documents_must_parse: None,
            }
            facts {
                remember_stores_every_field: None,
                remember_identical_text_is_a_duplicate: None,
                remember_with_key_supersedes_and_keeps_history: None,
                history_lists_versions_oldest_first: None,
                superseded_facts_are_not_recalled: None,
                recall_matches_lexical_definition: None,
                recall_orders_by_relevance_score_then_recency: None,
                recall_weighs_rare_words_over_common_ones: None,
                recall_ignores_short_tokens_and_splits_on_punctuation: None,
                recall_is_case_insensitive_over_unicode: None,
                recall_matches_every_unicode_normal_form: None,
                recall_respects_limit: None,
                recall_picks_past_the_limit_by_score_recency_then_id: None,
                recall_filters_by_tags_and_kind: None,
                recall_weighs_words_over_the_admitted_facts_only: None,
                recall_min_score_excludes_low_and_unscored: None,
                recall_without_tokens_returns_nothing: None,
                expired_facts_are_never_returned: None,
                max_facts_evicts_lowest_score_then_oldest: None,
                get_missing_fact_is_not_found: None,
                list_facts_pages_and_filters: None,
                forget_removes_a_fact: None,
                forget_of_an_expired_fact_reports_false: None,
                remember_rejects_invalid_input: None,
                semantic_recall_ranks_by_cosine: Vectors,
                hybrid_recall_fuses_ranks: Vectors,
                semantic_recall_sees_every_write_since_the_last: Vectors,
                semantic_recall_sees_its_own_evictions_supersedes_and_purges: Vectors,
                semantic_recall_sees_concurrent_remembers: Vectors,
                expired_facts_neither_dedupe_nor_count_toward_max_facts: None,
                set_expiry_expires_a_fact_and_none_makes_it_permanent: None,
                set_expiry_many_changes_only_live_facts_of_the_scope: None,
                remember_with_a_ttl_expires_after_it: None,
            }
            provenance {
                remember_records_the_writer_of_the_handle: None,
                superseding_versions_keep_each_writer: None,
                no_request_field_names_the_writer: None,
                recall_filters_by_origin_and_writer: None,
                semantic_recall_filters_by_origin_and_writer: Vectors,
                restore_records_the_importer_and_keeps_the_claim: None,
                valid_time_round_trips_and_must_be_an_interval: None,
                superseding_with_a_later_valid_from_closes_the_previous: None,
                recall_as_of_answers_what_was_true_then: None,
                recall_known_at_answers_what_the_store_knew_then: None,
            }
            changes {
                every_write_records_one_change_by_its_writer: ChangeFeed,
                vector_writes_record_their_collection_and_ids: ChangeFeedAndVectors,
                writes_that_change_nothing_record_nothing: ChangeFeed,
                changes_page_in_order_and_resume_after_any_cursor: ChangeFeed,
                each_namespace_has_its_own_feed: ChangeFeed,
                erasure_scrubs_the_subject_from_the_feed_and_counts_it: ChangeFeed,
                retention_trims_and_refuses_a_cursor_from_before_it: ChangeFeed,
                a_consumer_resumed_from_its_cursor_sees_every_change_once: ChangeFeed,
            }
            vectors {
                ensure_collection_is_idempotent: Vectors,
                ensure_collection_with_other_dims_metric_or_model_is_rejected: Vectors,
                drop_collection_removes_it_and_its_records: Vectors,
                missing_collection_is_not_found: Vectors,
                upsert_then_get_round_trips: Vectors,
                upsert_replaces_existing_id: Vectors,
                upsert_large_batch_keeps_last_of_repeated_id: Vectors,
                upsert_rejects_wrong_dimension_atomically: Vectors,
                upsert_rejects_nan_and_infinity: Vectors,
                zero_vector_is_rejected_only_under_cosine: Vectors,
                search_rejects_bad_queries: Vectors,
                exact_top_k_matches_reference_cosine: ExactVectors,
                exact_top_k_matches_reference_dot: ExactVectors,
                exact_top_k_matches_reference_euclidean: ExactVectors,
                exact_search_finds_the_nearest_rows_of_any_magnitude: ExactVectors,
                approximate_search_reaches_recall_at_10: ApproximateVectors,
                vector_operations_are_unsupported_without_vector_search: NoVectors,
                search_returns_min_of_k_and_matching: Vectors,
                filtered_search_fills_k_past_nearer_non_matching: Vectors,
                search_min_score_drops_weak_hits: Vectors,
                search_includes_vectors_only_when_asked: Vectors,
                delete_by_ids_reports_count: Vectors,
                delete_by_filter_removes_matching: Vectors,
                searches_after_own_writes_rank_what_is_stored: Vectors,
                ties_across_k_break_by_id_on_every_metric: Vectors,
                wide_collections_up_to_the_dimension_limit_are_searched: Vectors,
                scores_stay_finite_and_in_range_at_float_edges: Vectors,
                top_k_and_filter_depth_hold_at_their_limits: Vectors,
            }
            filters {
                filter_eq_matches_same_typed_values: Vectors,
                filter_ne_matches_missing_and_other_types: Vectors,
                filter_in_matches_any_listed_value: Vectors,
                filter_range_compares_numbers: Vectors,
                filter_range_compares_strings_by_code_point: Vectors,
                filter_exists_counts_null_as_present: Vectors,
                filter_boolean_operators_compose: Vectors,
                filter_nested_paths: Vectors,
                filter_never_matches_arrays_or_objects_as_scalars: Vectors,
                filter_values_are_bound_not_spliced: Vectors,
                malformed_filters_are_invalid: Vectors,
            }
            checkpoints {
                put_then_get_round_trips: None,
                put_existing_id_is_already_exists: None,
                update_with_current_version_bumps_it: None,
                update_with_stale_version_is_conflict: None,
                concurrent_updates_have_one_winner: None,
                list_suspended_filters_by_status_and_workflow: None,
                delete_and_missing_checkpoints: None,
            }
            cache {
                set_then_get_round_trips_bytes: None,
                set_replaces_value_and_ttl: None,
                ttl_expires_by_store_clock: None,
                delete_reports_whether_it_existed: None,
                namespaces_do_not_share_entries: None,
                invalid_keys_are_rejected: None,
                batches_read_and_write_like_single_calls: None,
            }
            isolation {
                conversation_of_other_subject_is_not_found: None,
                conversation_lists_are_per_scope: None,
                working_memory_of_other_subject_is_invisible: None,
                facts_of_other_subject_are_invisible: None,
                recall_by_vector_never_crosses_scopes: Vectors,
                supersede_never_crosses_scopes: None,
                vectors_of_other_subject_are_invisible: Vectors,
                checkpoints_of_other_subject_are_invisible: None,
                shared_scope_is_separate_from_subjects: None,
                collections_are_per_namespace: Vectors,
            }
            lifecycle {
                delete_conversation_cascades: None,
                forget_all_counts_only_unexpired_facts: None,
                forget_all_receipt_counts_every_row: None,
                count_owned_is_the_receipt_forget_all_then_gives: None,
                forget_all_leaves_nothing_behind: None,
                forget_all_leaves_others_untouched: None,
                forget_all_requires_a_subject: None,
                forget_namespace_erases_everything_in_it_and_nothing_else: None,
            }
            transfer {
                export_then_restore_round_trips_every_record: None,
                restore_twice_is_the_same_as_once: None,
                restore_is_all_or_nothing_and_needs_parents: None,
                restore_refuses_what_the_write_api_refuses: None,
                scopes_list_exactly_the_owners: None,
                export_leaves_out_expired_records: None,
            }
            payload {
                message_text_round_trips: None,
                tool_calls_and_results_round_trip: None,
                conversation_fields_round_trip: None,
                identifiers_round_trip: None,
                fact_fields_round_trip: None,
                working_memory_round_trips: None,
                vector_payloads_round_trip: Vectors,
                checkpoint_state_round_trips: None,
                cache_keys_round_trip: None,
                one_mebibyte_text_round_trips: None,
                json_deeper_than_the_limit_is_refused_and_the_limit_round_trips: None,
                identifiers_at_the_length_limit_round_trip: None,
            }
            differential {
                generated_sequences_answer_like_the_reference: None,
            }
        } }
    };
}

/// The engine's part of the table, there only with the `engine` feature: its scenarios follow
/// the contracts' in [`SCENARIOS`] and in [`suite!`].
#[cfg(feature = "engine")]
#[doc(hidden)]
#[macro_export]
macro_rules! __with_engine_scenarios {
    ($callback:ident! { $($args:tt)* }) => {
        $crate::$callback! { $($args)*
            memories {
                memories_cross_subjects_only_through_a_grant_in_force: None,
                store_checks_data_against_its_kind_naming_the_path: None,
                unique_on_supersedes_and_keeps_history: None,
                unique_on_is_atomic_under_concurrent_writers: None,
                without_unique_on_an_id_updates: None,
                search_filters_and_reports_relevance_confidence_latest_and_source: None,
                export_and_restore_carry_kinds_memories_and_grants: None,
                store_many_applies_the_request_ttl_to_memories_without_one: None,
                registry_records_are_written_by_the_registry_alone: None,
                registry_records_are_changed_by_the_registry_alone: None,
                restore_keeps_one_current_version_of_each_registry_key: None,
                an_unreadable_registry_record_is_skipped: Unchecked,
                erasure_removes_every_version_of_its_grants: None,
                kinds_and_ids_never_share_a_key: None,
                schemas_and_data_at_the_depth_limit_read_back: None,
                kind_rules_hold_at_register_and_kinds_can_be_deleted: None,
            }
            engine {
                twenty_turn_conversation_keeps_window_summary_budget_and_facts: None,
                failing_extractor_leaves_the_turn_committed: None,
                extraction_honours_threshold_hook_and_namespace: None,
                extracted_facts_expire_after_the_configured_ttl: None,
                extraction_records_the_extractor_and_the_tool_origin: None,
                extraction_into_kinds_supersedes_and_resending_creates_nothing: None,
                session_reads_history_and_appends_only_its_own: None,
                sliding_window_session_reads_the_last_messages: None,
                summarizing_session_summarizes_what_left_the_window: None,
                injected_facts_cannot_break_the_fence: None,
                prepare_and_commit_stay_in_scope: None,
                auto_conversation_is_one_thread_per_subject_and_agent: None,
                working_memory_tools_follow_the_schema: None,
                semantic_recall_merges_older_messages_by_strategy: Vectors,
                semantic_recall_knows_who_spoke_and_when: Vectors,
                semantic_recall_fuses_lexical_relevance: Vectors,
                semantic_recall_proposes_messages_by_their_words: Vectors,
                explain_agrees_with_recall_and_says_why: Vectors,
                semantic_recall_finds_a_reply_by_the_words_it_answered: Vectors,
                semantic_recall_reads_only_its_scope: Vectors,
                semantic_recall_matches_word_forms_of_the_question: Vectors,
                semantic_recall_finds_a_reply_by_what_it_answered: Vectors,
                knowledge_hits_come_from_sources_above_threshold: Vectors,
                failing_embedder_leaves_the_turn_committed: Vectors,
                cached_embedder_embeds_each_text_once: None,
                prompt_cache_handles_are_shared_and_expire: None,
            }
        }
    };
}

#[cfg(not(feature = "engine"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __with_engine_scenarios {
    ($callback:ident! { $($args:tt)* }) => {
        $crate::$callback! { $($args)* }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __scenario_list {
    ($( $group:ident { $( $name:ident: $requires:ident ),* $(,)? } )*) => {
        /// The canonical list of scenarios: every behaviour a backend must show, with what it
        /// needs.
        pub static SCENARIOS: &[Scenario] = &[
            $($(
                Scenario {
                    name: concat!(stringify!($group), "::", stringify!($name)),
                    requires: Requirement::$requires,
                    run: |ctx| Box::pin($group::$name(ctx)),
                },
            )*)*
        ];
    };
}

__with_scenarios!(__scenario_list! {});

#[doc(hidden)]
#[macro_export]
macro_rules! __scenario_names {
    ($( $group:ident { $( $name:ident: $requires:ident ),* $(,)? } )*) => {
        /// The names of the engine's scenarios (feature `engine`; empty without it): a backend
        /// that runs only the contracts' suite is not expected to report them.
        pub static ENGINE_SCENARIOS: &[&str] = &[
            $($( concat!(stringify!($group), "::", stringify!($name)), )*)*
        ];
    };
}

__with_engine_scenarios!(__scenario_names! {});

/// Emits one test per scenario (each on its own multi-threaded tokio runtime) for a backend
/// factory.
///
/// `factory` is an `async fn(Arc<dyn Clock>) -> Result<Arc<dyn MemoryBackend>, SetupError>`;
/// the backend must take "now" from that clock. Tests are grouped in modules by contract
/// (`conversation::append_assigns_contiguous_seq`, …). Scenarios the backend's capabilities
/// exclude, and all of them when its service is unreachable (unless `MNEMIX_TEST_REQUIRE` names
/// it), print `SKIP <scenario>: <reason>`. A scenario that does not finish within 600 s (its
/// backend's setup included; `MNEMIX_TEST_SCENARIO_SECS` sets another limit) fails by name.
///
/// ```ignore
/// async fn factory(clock: Arc<dyn Clock>) -> Result<Arc<dyn MemoryBackend>, SetupError> {
///     Ok(Arc::new(InMemoryBackend::with_clock(clock)))
/// }
/// mnemix_conformance::suite!("memory", factory);
/// ```
#[macro_export]
macro_rules! suite {
    ($backend:literal, $factory:path) => {
        $crate::__with_scenarios!(__suite! { $backend, $factory; });
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __suite {
    ($backend:literal, $factory:path; $( $group:ident { $( $name:ident: $requires:ident ),* $(,)? } )*) => {
        #[doc(hidden)]
        fn __conformance_factory(
            clock: ::std::sync::Arc<dyn $crate::__private::Clock>,
        ) -> $crate::BoxFuture<
            'static,
            ::std::result::Result<
                ::std::sync::Arc<dyn $crate::__private::MemoryBackend>,
                $crate::SetupError,
            >,
        > {
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
    };
}

/// What the macros name through `$crate`, so a user's crate needs no `mnemix-core` in scope.
#[doc(hidden)]
pub mod __private {
    pub use mnemix_core::{Clock, MemoryBackend};
}
