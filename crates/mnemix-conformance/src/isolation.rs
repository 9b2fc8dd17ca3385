//! Tenant isolation: another subject's (or namespace's) ids and searches see nothing, through
//! every method of every contract.

use mnemix_core::{
    AppendOptions, CheckpointId, CheckpointStatus, CheckpointUpdate, ConversationQuery,
    ConversationUpdate, FactQuery, FactStore, LoadOptions, Metric, NewCheckpoint, NewFact,
    RecallQuery, RememberOptions, Scope, VectorQuery, VectorSelector, WorkingMemoryKey,
    WorkingMemoryUpdate,
};
use serde_json::json;

use crate::support::{conversation_with, load, texts, unit_vector, ResultExt};
use crate::vectors::{collection, record, seeded, vid, DIMS};
use crate::Ctx;

/// Every conversation method given another subject's conversation id is `NotFound` (or `false`),
/// and nothing of it changes.
pub async fn conversation_of_other_subject_is_not_found(ctx: &Ctx) {
    let c = conversation_with(ctx, texts("m", 3)).await;
    for intruder in [
        ctx.other_scope().clone(),
        ctx.foreign_namespace_scope(),
        ctx.shared_scope(),
    ] {
        let b = ctx.backend();
        b.get_conversation(&intruder, &c.id)
            .await
            .must_be_not_found("get");
        b.update_conversation(
            &intruder,
            &c.id,
            ConversationUpdate {
                title: Some(Some("x".into())),
                metadata: None,
            },
        )
        .await
        .must_be_not_found("update");
        b.append(&intruder, &c.id, texts("evil", 1), AppendOptions::default())
            .await
            .must_be_not_found("append");
        b.load(&intruder, &c.id, LoadOptions::default())
            .await
            .must_be_not_found("load");
        for seqs in [&[][..], &[1, 2][..]] {
            b.load_seqs(&intruder, &c.id, seqs)
                .await
                .must_be_not_found("load_seqs");
        }
        b.cursor(&intruder, &c.id, "x")
            .await
            .must_be_not_found("cursor");
        b.advance_cursor(&intruder, &c.id, "x", 9)
            .await
            .must_be_not_found("advance cursor");
        assert!(
            !b.delete_conversation(&intruder, &c.id).await.must("delete"),
            "delete reports false"
        );
    }
    let read = ctx
        .backend()
        .get_conversation(ctx.scope(), &c.id)
        .await
        .must("owner still sees it");
    assert_eq!(read.title, None);
    assert_eq!(load(ctx, &c.id, LoadOptions::default()).await.len(), 3);
}

/// Listings are per subject and per namespace.
pub async fn conversation_lists_are_per_scope(ctx: &Ctx) {
    conversation_with(ctx, texts("m", 1)).await;
    let b = ctx.backend();
    for intruder in [
        ctx.other_scope().clone(),
        ctx.foreign_namespace_scope(),
        ctx.shared_scope(),
    ] {
        assert!(b
            .list_conversations(&intruder, ConversationQuery::default())
            .await
            .must("list")
            .items
            .is_empty());
    }
    assert_eq!(
        b.list_conversations(ctx.scope(), ConversationQuery::default())
            .await
            .must("own")
            .items
            .len(),
        1
    );
}

/// Working memory of another subject is invisible and untouchable.
pub async fn working_memory_of_other_subject_is_invisible(ctx: &Ctx) {
    let c = conversation_with(ctx, texts("m", 1)).await;
    let b = ctx.backend();
    let conv_key = WorkingMemoryKey::Conversation(c.id.clone());
    b.set_working_memory(
        ctx.scope(),
        &WorkingMemoryKey::User,
        WorkingMemoryUpdate::markdown("mine"),
    )
    .await
    .must("set");
    b.set_working_memory(
        ctx.scope(),
        &conv_key,
        WorkingMemoryUpdate::markdown("thread"),
    )
    .await
    .must("set");
    let other = ctx.other_scope();
    assert_eq!(
        b.get_working_memory(other, &WorkingMemoryKey::User)
            .await
            .must("other user doc"),
        None
    );
    b.get_working_memory(other, &conv_key)
        .await
        .must_be_not_found("other conv doc");
    b.set_working_memory(other, &conv_key, WorkingMemoryUpdate::markdown("evil"))
        .await
        .must_be_not_found("set");
    b.clear_working_memory(other, &conv_key)
        .await
        .must_be_not_found("clear");
    assert!(!b
        .clear_working_memory(other, &WorkingMemoryKey::User)
        .await
        .must("clear user"));
    let mine = b
        .get_working_memory(ctx.scope(), &WorkingMemoryKey::User)
        .await
        .must("get")
        .expect("kept");
    assert_eq!(mine.content, "mine");
}

/// Facts of another subject are not found, not listed, not recalled, not forgotten.
pub async fn facts_of_other_subject_are_invisible(ctx: &Ctx) {
    let b = ctx.backend();
    let fact = NewFact::new("secret plan alpha").with_key("k");
    let stored = b
        .remember(ctx.scope(), fact, RememberOptions::default())
        .await
        .must("remember")
        .fact;
    for intruder in [
        ctx.other_scope().clone(),
        ctx.foreign_namespace_scope(),
        ctx.shared_scope(),
    ] {
        b.get_fact(&intruder, &stored.id)
            .await
            .must_be_not_found("get");
        assert!(!b.forget(&intruder, &stored.id).await.must("forget"));
        assert!(b.history(&intruder, "k").await.must("history").is_empty());
        assert!(b
            .list_facts(&intruder, FactQuery::default())
            .await
            .must("list")
            .items
            .is_empty());
        assert!(
            FactStore::recall(b, &intruder, RecallQuery::text("secret plan"))
                .await
                .must("recall")
                .is_empty()
        );
    }
    let own = FactStore::recall(b, ctx.scope(), RecallQuery::text("secret"))
        .await
        .must("own recall");
    assert_eq!(own.len(), 1);
}

/// A recall by vector in another scope finds none of this scope's facts, even right after this
/// scope's recall (a store that holds a subject's facts between recalls keys them by scope),
/// and then this scope's recall still finds only its own.
pub async fn recall_by_vector_never_crosses_scopes(ctx: &Ctx) {
    let b = ctx.backend();
    let vector = unit_vector(8, 11);
    let fact = NewFact::new("secret plan alpha").with_embedding(vector.clone());
    b.remember(ctx.scope(), fact, RememberOptions::default())
        .await
        .must("remember");
    let query = || RecallQuery::text("secret plan").with_vector(vector.clone());
    let own = FactStore::recall(b, ctx.scope(), query())
        .await
        .must("own recall");
    assert_eq!(own.len(), 1);
    for intruder in [
        ctx.other_scope().clone(),
        ctx.foreign_namespace_scope(),
        ctx.shared_scope(),
    ] {
        assert!(
            FactStore::recall(b, &intruder, query())
                .await
                .must("recall")
                .is_empty(),
            "{intruder:?} recalled another scope's fact"
        );
        let decoy = NewFact::new("decoy plan beta").with_embedding(vector.clone());
        b.remember(&intruder, decoy, RememberOptions::default())
            .await
            .must("intruder's remember");
    }
    let own = FactStore::recall(b, ctx.scope(), query())
        .await
        .must("own recall again");
    assert_eq!(crate::facts::texts(&own), ["secret plan alpha"]);
}

/// A remember in another scope with the same key never supersedes this scope's fact.
pub async fn supersede_never_crosses_scopes(ctx: &Ctx) {
    let b = ctx.backend();
    let keyed = |t: &str| NewFact::new(t).with_key("city");
    let mine = b
        .remember(
            ctx.scope(),
            keyed("Lives in Rome"),
            RememberOptions::default(),
        )
        .await
        .must("mine")
        .fact;
    let theirs = b
        .remember(
            ctx.other_scope(),
            keyed("Lives in Lima"),
            RememberOptions::default().with_max_facts(1),
        )
        .await
        .must("theirs");
    assert_eq!(theirs.status, mnemix_core::RememberStatus::Created);
    assert!(theirs.evicted.is_empty());
    assert!(b
        .get_fact(ctx.scope(), &mine.id)
        .await
        .must("still mine")
        .is_current());
}

/// Vectors of another subject are not found, not searched, not deleted.
pub async fn vectors_of_other_subject_are_invisible(ctx: &Ctx) {
    let spec = collection(ctx, Metric::Cosine).await;
    seeded(ctx, &spec, 5).await;
    let b = ctx.backend();
    for intruder in [ctx.other_scope().clone(), ctx.shared_scope()] {
        b.get_vector(&intruder, &spec.name, &vid("r0"))
            .await
            .must_be_not_found("get");
        let hits = b
            .search(
                &intruder,
                &spec.name,
                VectorQuery::new(unit_vector(DIMS, 0), 10),
            )
            .await
            .must("search");
        assert!(hits.is_empty(), "search sees nothing");
        let ids = VectorSelector::Ids(vec![vid("r0"), vid("r1")]);
        assert_eq!(
            b.delete_vectors(&intruder, &spec.name, ids)
                .await
                .must("delete ids"),
            0
        );
        let all = VectorSelector::Filter(mnemix_core::Filter::and([]));
        assert_eq!(
            b.delete_vectors(&intruder, &spec.name, all)
                .await
                .must("delete filter"),
            0
        );
    }
    let same_id = record("r0", unit_vector(DIMS, 77), json!({"owner": "bob"}));
    b.upsert_vectors(ctx.other_scope(), &spec.name, vec![same_id])
        .await
        .must("other upserts same id");
    let mine = b
        .get_vector(ctx.scope(), &spec.name, &vid("r0"))
        .await
        .must("mine intact");
    assert_eq!(mine.vector, unit_vector(DIMS, 0));
    assert_eq!(
        b.search(
            ctx.scope(),
            &spec.name,
            VectorQuery::new(unit_vector(DIMS, 0), 10)
        )
        .await
        .must("own")
        .len(),
        5
    );
}

/// Checkpoints of another subject are not found and cannot be updated or deleted.
pub async fn checkpoints_of_other_subject_are_invisible(ctx: &Ctx) {
    let b = ctx.backend();
    let id = CheckpointId::new("run-1").unwrap();
    let new = NewCheckpoint::new(id.clone(), "w", CheckpointStatus::Suspended, json!({}));
    b.put_checkpoint(ctx.scope(), new.clone()).await.must("put");
    let other = ctx.other_scope();
    b.get_checkpoint(other, &id).await.must_be_not_found("get");
    let update = CheckpointUpdate {
        expected_version: 1,
        status: CheckpointStatus::Failed,
        state: json!("evil"),
    };
    b.update_checkpoint(other, &id, update)
        .await
        .must_be_not_found("update");
    assert!(!b.delete_checkpoint(other, &id).await.must("delete"));
    assert!(b.list_suspended(other, None).await.must("list").is_empty());
    b.put_checkpoint(other, new)
        .await
        .must("same id in other scope is independent");
    assert_eq!(
        b.get_checkpoint(ctx.scope(), &id)
            .await
            .must("mine")
            .version,
        1
    );
}

/// The shared (namespace-wide) scope is separate from every subject's.
pub async fn shared_scope_is_separate_from_subjects(ctx: &Ctx) {
    let b = ctx.backend();
    let shared: Scope = ctx.shared_scope();
    b.remember(
        &shared,
        NewFact::new("company holiday is friday"),
        RememberOptions::default(),
    )
    .await
    .must("shared");
    assert!(
        FactStore::recall(b, ctx.scope(), RecallQuery::text("holiday"))
            .await
            .must("subject")
            .is_empty()
    );
    assert_eq!(
        FactStore::recall(b, &shared, RecallQuery::text("holiday"))
            .await
            .must("shared")
            .len(),
        1
    );
}

/// Collections belong to a namespace: another namespace neither lists nor searches them.
pub async fn collections_are_per_namespace(ctx: &Ctx) {
    let spec = collection(ctx, Metric::Cosine).await;
    seeded(ctx, &spec, 3).await;
    let foreign = ctx.foreign_namespace_scope();
    let b = ctx.backend();
    assert!(b
        .list_collections(foreign.namespace())
        .await
        .must("list")
        .is_empty());
    b.search(
        &foreign,
        &spec.name,
        VectorQuery::new(unit_vector(DIMS, 0), 3),
    )
    .await
    .must_be_not_found("search in another namespace");
    assert!(!b
        .drop_collection(foreign.namespace(), &spec.name)
        .await
        .must("drop from another namespace"));
    assert_eq!(
        b.list_collections(ctx.namespace()).await.must("own").len(),
        1
    );
}
