//! Checks that need two handles on one store's data — two processes, in effect — for a
//! backend's own tests to run: a scenario has one handle, and only the backend knows how to
//! open a second on the same data (the same file, server or key prefix).

use mnemix_core::{
    CollectionSpec, MemoryBackend, NewConversation, NewFact, RecallQuery, RememberOptions, Scope,
    VectorId, VectorQuery, VectorRecord, VectorSelector,
};

use crate::support::ResultExt;

/// The ids of the top 3 hits for `[1, 0, 0, 0]` in the collection `notes`.
async fn found(store: &dyn MemoryBackend, scope: &Scope) -> Vec<String> {
    let query = VectorQuery::new(vec![1.0, 0.0, 0.0, 0.0], 3);
    store
        .search(scope, "notes", query)
        .await
        .must("search")
        .into_iter()
        .map(|hit| hit.record.id.to_string())
        .collect()
}

/// Whatever a store keeps of a scope's vectors between searches (a matrix held in the
/// process, say), every kind of vector write made through another handle — upsert, delete,
/// a conversation's delete, `forget_all`, a drop and re-create of the collection — is seen by
/// the next search of `reader`, which searched before it. `scope` should hold nothing yet.
pub async fn searches_see_writes_of_another_handle(
    reader: &dyn MemoryBackend,
    writer: &dyn MemoryBackend,
    scope: &Scope,
) {
    let spec = CollectionSpec::new("notes", 4, "test-model");
    writer
        .ensure_collection(scope.namespace(), spec.clone())
        .await
        .must("ensure_collection");
    let record = |id: &str, vector: [f32; 4]| {
        VectorRecord::new(VectorId::new(id).expect("an id"), vector.to_vec())
    };
    let far: Vec<VectorRecord> = (0..20u8)
        .map(|i| record(&format!("far-{i:02}"), [0.1, 1.0, f32::from(i), 0.5]))
        .collect();
    writer
        .upsert_vectors(scope, "notes", far)
        .await
        .must("upsert");
    let before = found(reader, scope).await;
    assert_eq!(before.len(), 3);
    assert_eq!(
        found(reader, scope).await,
        before,
        "a second search ranks the same"
    );

    writer
        .upsert_vectors(scope, "notes", vec![record("near", [2.0, 0.0, 0.0, 0.0])])
        .await
        .must("upsert");
    assert_eq!(found(reader, scope).await[0], "near", "an upsert is seen");

    writer
        .delete_vectors(
            scope,
            "notes",
            VectorSelector::Ids(vec![VectorId::new("near").expect("an id")]),
        )
        .await
        .must("delete");
    assert_eq!(found(reader, scope).await, before, "a delete is seen");

    let thread = writer
        .create_conversation(scope, NewConversation::default())
        .await
        .must("create_conversation");
    let mut owned = record("owned", [3.0, 0.0, 0.0, 0.0]);
    owned.conversation_id = Some(thread.id.clone());
    writer
        .upsert_vectors(scope, "notes", vec![owned])
        .await
        .must("upsert");
    assert_eq!(found(reader, scope).await[0], "owned");
    writer
        .delete_conversation(scope, &thread.id)
        .await
        .must("delete_conversation");
    assert_eq!(
        found(reader, scope).await,
        before,
        "a conversation's delete is seen"
    );

    writer.forget_all(scope).await.must("forget_all");
    assert!(found(reader, scope).await.is_empty(), "an erasure is seen");
    writer
        .upsert_vectors(scope, "notes", vec![record("again", [1.0, 1.0, 0.0, 0.0])])
        .await
        .must("upsert");
    assert_eq!(
        found(reader, scope).await,
        ["again"],
        "a write after the erasure is seen"
    );

    writer
        .drop_collection(scope.namespace(), "notes")
        .await
        .must("drop_collection");
    writer
        .ensure_collection(scope.namespace(), spec)
        .await
        .must("ensure_collection");
    writer
        .upsert_vectors(scope, "notes", vec![record("fresh", [1.0, 0.0, 1.0, 0.0])])
        .await
        .must("upsert");
    assert_eq!(
        found(reader, scope).await,
        ["fresh"],
        "a collection made again starts empty"
    );
}

/// The texts of a semantic recall for `[1, 0, 0, 0]`.
async fn recalled(store: &dyn MemoryBackend, scope: &Scope) -> Vec<String> {
    store
        .recall(
            scope,
            RecallQuery::default().with_vector(vec![1.0, 0.0, 0.0, 0.0]),
        )
        .await
        .must("recall")
        .into_iter()
        .map(|hit| hit.fact.text)
        .collect()
}

/// The texts of a lexical recall of every word the scenario's facts use, sorted.
async fn recalled_by_words(store: &dyn MemoryBackend, scope: &Scope) -> Vec<String> {
    let mut texts: Vec<String> = store
        .recall(
            scope,
            RecallQuery::text("far near nearer farther kept again"),
        )
        .await
        .must("recall")
        .into_iter()
        .map(|hit| hit.fact.text)
        .collect();
    texts.sort();
    texts
}

/// Whatever a store keeps of a subject's facts between recalls (held in the process, say),
/// every kind of fact write made through another handle — remember, supersede, forget, a new
/// expiry, `forget_all` then remember again — is seen by the next semantic recall of `reader`,
/// which recalled before it, and by its next lexical recall; and `writer`, recalling too, ranks
/// its own writes (a remember's eviction included) as `reader` does. `scope` should hold nothing yet.
pub async fn recalls_see_facts_written_by_another_handle(
    reader: &dyn MemoryBackend,
    writer: &dyn MemoryBackend,
    scope: &Scope,
) {
    let fact = |text: &str, vector: [f32; 4]| NewFact::new(text).with_embedding(vector.to_vec());
    let remember = |new: NewFact| async move {
        writer
            .remember(scope, new, RememberOptions::default())
            .await
            .must("remember")
            .fact
    };
    let both = |expected: &'static [&'static str], what: &'static str| async move {
        assert_eq!(recalled(reader, scope).await, expected, "{what}");
        assert_eq!(
            recalled(writer, scope).await,
            expected,
            "{what}, by the writer"
        );
        let mut by_words: Vec<&str> = expected.to_vec();
        by_words.sort_unstable();
        assert_eq!(
            recalled_by_words(reader, scope).await,
            by_words,
            "{what}, by words"
        );
    };
    remember(fact("far", [0.0, 1.0, 0.0, 0.0])).await;
    both(&["far"], "a first remember").await;
    remember(fact("near", [1.0, 0.1, 0.0, 0.0]).with_key("place")).await;
    both(&["near", "far"], "a remember").await;
    remember(fact("nearer", [1.0, 0.0, 0.0, 0.0]).with_key("place")).await;
    both(&["nearer", "far"], "a supersede").await;
    writer
        .remember(
            scope,
            fact("farther", [0.0, 0.0, 1.0, 0.0]),
            RememberOptions::default().with_max_facts(2),
        )
        .await
        .must("remember with eviction");
    both(&["nearer", "farther"], "an eviction").await;
    let farther = writer
        .list_facts(scope, mnemix_core::FactQuery::default())
        .await
        .must("list")
        .items
        .into_iter()
        .find(|f| f.text == "farther")
        .expect("farther is listed");
    assert!(writer.forget(scope, &farther.id).await.must("forget"));
    remember(fact("far", [0.0, 1.0, 0.0, 0.0])).await;
    let far = writer
        .list_facts(scope, mnemix_core::FactQuery::default())
        .await
        .must("list")
        .items
        .into_iter()
        .find(|f| f.text == "far")
        .expect("far is listed");
    assert!(writer.forget(scope, &far.id).await.must("forget"));
    both(&["nearer"], "a forget").await;
    let past = writer.now();
    let nearer = &writer
        .list_facts(scope, mnemix_core::FactQuery::default())
        .await
        .must("list")
        .items[0];
    writer
        .set_expiry(scope, std::slice::from_ref(&nearer.id), Some(past))
        .await
        .must("set expiry");
    both(&[], "a new expiry").await;
    remember(fact("kept", [1.0, 0.0, 0.0, 0.0])).await;
    both(&["kept"], "a remember after an expiry").await;
    writer.forget_all(scope).await.must("forget_all");
    both(&[], "forget_all").await;
    remember(fact("again", [1.0, 0.0, 0.0, 0.0])).await;
    both(&["again"], "written again").await;
}
