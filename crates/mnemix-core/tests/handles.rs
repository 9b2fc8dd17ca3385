//! The scope-bound handles pass every builder option through to the contract they call.

use mnemix_core::{
    CollectionSpec, Filter, InMemoryBackend, Message, Role, Store, VectorId, VectorRecord,
    WorkingMemoryUpdate,
};

fn store() -> Store {
    Store::new(InMemoryBackend::new())
}

#[tokio::test]
async fn conversations_append_and_load_with_every_option() {
    let store = store();
    let user = store.scope("support", "user-1").unwrap();
    let thread = user
        .new_conversation()
        .agent("bot")
        .title("Billing")
        .resource("invoices")
        .record("inv-7")
        .await
        .unwrap();
    assert_eq!(thread.title.as_deref(), Some("Billing"));
    assert_eq!(thread.record_id.as_deref(), Some("inv-7"));
    user.new_conversation().agent("other").await.unwrap();
    let listed = user.conversations().agent("bot").limit(5).await.unwrap();
    assert_eq!(listed.items.len(), 1);
    assert_eq!(listed.items[0].id, thread.id);

    let chat = user.conversation(&thread.id);
    let first = chat
        .append([Message::user("one"), Message::assistant("two")])
        .await
        .unwrap();
    assert_eq!(first.last_seq, 2);
    let stale = chat
        .append([Message::user("three")])
        .expect_last_seq(1)
        .await
        .unwrap_err();
    assert_eq!(stale.current(), Some(2));
    let pruned = chat
        .append([Message::user("three"), Message::user("four")])
        .expect_last_seq(2)
        .max_messages(3)
        .await
        .unwrap();
    assert_eq!(pruned.pruned, 1);

    let seqs = |window: Vec<mnemix_core::StoredMessage>| -> Vec<u64> {
        window.iter().map(|m| m.seq).collect()
    };
    assert_eq!(seqs(chat.load().await.unwrap()), [2, 3, 4]);
    assert_eq!(seqs(chat.load().last(2).await.unwrap()), [3, 4]);
    assert_eq!(seqs(chat.load().after(2).before(4).await.unwrap()), [3]);
    assert_eq!(seqs(chat.load().roles([Role::User]).await.unwrap()), [3, 4]);
    assert_eq!(seqs(chat.load().raw().await.unwrap()), [2, 3, 4]);

    assert_eq!(
        chat.set_title(None).await.unwrap().title,
        None,
        "the title is cleared"
    );
    assert!(chat.delete().await.unwrap());
    assert!(chat.get().await.unwrap_err().is_not_found());
}

#[tokio::test]
async fn facts_remember_and_recall_with_every_option() {
    let store = store();
    let user = store.scope("support", "user-2").unwrap();
    let facts = user.facts();
    facts
        .remember("Prefers window seats")
        .kind("preference")
        .key("seat")
        .tags(["travel", "flights"])
        .score(0.9)
        .await
        .unwrap();
    let changed = facts
        .remember("Prefers aisle seats")
        .kind("preference")
        .key("seat")
        .tags(["travel"])
        .score(0.4)
        .await
        .unwrap();
    assert!(matches!(
        changed.status,
        mnemix_core::RememberStatus::Superseded { .. }
    ));
    facts
        .remember("Lives in Lyon")
        .kind("profile")
        .await
        .unwrap();

    let seats = facts.recall("seats").await.unwrap();
    assert_eq!(seats.len(), 1, "superseded history is not recalled");
    assert_eq!(seats[0].fact.text, "Prefers aisle seats");
    assert!(facts
        .recall("seats")
        .tags(["flights"])
        .await
        .unwrap()
        .is_empty());
    assert!(facts
        .recall("seats")
        .min_score(0.5)
        .await
        .unwrap()
        .is_empty());
    assert!(facts
        .recall("seats lyon")
        .kind("profile")
        .limit(1)
        .await
        .unwrap()
        .iter()
        .all(|f| f.fact.kind.as_deref() == Some("profile")));

    assert_eq!(facts.history("seat").await.unwrap().len(), 2);
    assert_eq!(facts.list().await.unwrap().items.len(), 2);
    assert_eq!(facts.list().with_history().await.unwrap().items.len(), 3);
    assert_eq!(
        facts
            .list()
            .kind("profile")
            .limit(10)
            .await
            .unwrap()
            .items
            .len(),
        1
    );
    let id = changed.fact.id;
    assert!(facts.forget(&id).await.unwrap());
    assert!(facts.get(&id).await.unwrap_err().is_not_found());
}

#[tokio::test]
async fn working_memory_and_vectors_through_handles() {
    let store = store();
    let user = store.scope("support", "user-3").unwrap();
    let profile = user.working_memory();
    let first = profile
        .set(WorkingMemoryUpdate::markdown("# Profile"))
        .await
        .unwrap();
    assert_eq!(first.revision, 1);
    assert!(profile
        .set(WorkingMemoryUpdate::markdown("stale").expecting(0))
        .await
        .unwrap_err()
        .is_conflict());
    assert!(profile.clear().await.unwrap());
    assert_eq!(profile.get().await.unwrap(), None);

    user.ensure_collection(CollectionSpec::new("docs", 2, "test-model"))
        .await
        .unwrap();
    let docs = user.vectors("docs");
    let record = |id: &str, vector: Vec<f32>, side: &str| {
        let mut record = VectorRecord::new(VectorId::new(id).unwrap(), vector);
        record.metadata.insert("side".into(), side.into());
        record
    };
    docs.upsert([
        record("a", vec![1.0, 0.0], "left"),
        record("b", vec![0.9, 0.1], "right"),
        record("c", vec![0.0, 1.0], "right"),
    ])
    .await
    .unwrap();
    let hits = docs.search(vec![1.0, 0.0]).k(2).await.unwrap();
    assert_eq!(hits.len(), 2);
    assert_eq!(hits[0].record.id.as_str(), "a");
    assert!(hits[0].record.vector.is_empty());
    let right = docs
        .search(vec![1.0, 0.0])
        .filter(Filter::eq("side", "right"))
        .include_vectors()
        .await
        .unwrap();
    assert_eq!(right[0].record.id.as_str(), "b");
    assert_eq!(right[0].record.vector, vec![0.9, 0.1]);
    assert_eq!(
        docs.delete_matching(Filter::eq("side", "right"))
            .await
            .unwrap(),
        2
    );
    assert_eq!(docs.delete([VectorId::new("a").unwrap()]).await.unwrap(), 1);
    assert_eq!(user.forget_all().await.unwrap().total(), 0);
}
