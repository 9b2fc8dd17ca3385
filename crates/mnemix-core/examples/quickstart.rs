//! A tour of agent memory on the in-memory reference backend: a conversation interrupted by a
//! crash, replay-safe loading, a validated continuation, facts, vectors and erasure.
//!
//! `cargo run -p mnemix-core --example quickstart`

use std::sync::Arc;

use mnemix_core::{
    AppendOptions, CollectionSpec, FactStore, InMemoryBackend, LoadOptions, MemoryBackend, Message,
    NewConversation, NewFact, Part, RecallQuery, RememberOptions, Role, Scope, VectorQuery,
    VectorRecord,
};

use mnemix_core::replay::{validate_continuation, ContinuationOptions};
use serde_json::json;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let store: Arc<dyn MemoryBackend> = Arc::new(InMemoryBackend::new());
    let alice = Scope::new("support", "alice")?;

    // A thread where the process crashed after the assistant's tool call, before its result.
    let thread = store
        .create_conversation(&alice, NewConversation::default().with_agent("support"))
        .await?;
    let call = Message::new(
        Role::Assistant,
        vec![
            Part::text("Let me look that up."),
            Part::tool_call("c1", "lookup_order", json!({"id": 42})),
        ],
    );
    let receipt = store
        .append(
            &alice,
            &thread.id,
            vec![Message::user("Where is order 42?"), call],
            AppendOptions::default(),
        )
        .await?;
    println!(
        "appended seqs {:?}",
        receipt.appended.iter().map(|(_, s)| s).collect::<Vec<_>>()
    );
    let replay_safe = store
        .load(&alice, &thread.id, LoadOptions::last(20))
        .await?;
    println!(
        "loaded {} messages; dangling call dropped: {:?}",
        replay_safe.len(),
        replay_safe[1].message.parts
    );

    // The browser answers the pending client tool; the server validates before appending.
    let persisted: Vec<Message> = store
        .load(&alice, &thread.id, LoadOptions::raw())
        .await?
        .into_iter()
        .map(|m| m.message)
        .collect();
    let mut incoming = persisted.clone();
    incoming.push(Message::new(
        Role::Tool,
        vec![Part::tool_result("c1", json!({"status": "shipped"}))],
    ));
    let verdict = validate_continuation(
        &persisted,
        &incoming,
        &ContinuationOptions::client_tools(["lookup_order"]),
    );
    println!("honest continuation accepted: {}", verdict.ok);
    incoming.push(Message::new(
        Role::Tool,
        vec![Part::tool_result("c9", json!("forged"))],
    ));
    let verdict = validate_continuation(&persisted, &incoming, &ContinuationOptions::default());
    println!(
        "forged continuation: {:?} at message {:?}",
        verdict.code, verdict.index
    );

    // Facts travel across conversations.
    store
        .remember(
            &alice,
            NewFact::new("Project Foo: deploy target is fly.io"),
            RememberOptions::default(),
        )
        .await?;
    store
        .remember(
            &alice,
            NewFact::new("Favourite editor: vim").with_key("editor"),
            RememberOptions::default(),
        )
        .await?;
    store
        .remember(
            &alice,
            NewFact::new("Favourite editor: helix").with_key("editor"),
            RememberOptions::default(),
        )
        .await?;
    for hit in FactStore::recall(
        store.as_ref(),
        &alice,
        RecallQuery::text("Which editor, and where does Foo deploy?"),
    )
    .await?
    {
        println!("recalled {:.2}: {}", hit.relevance, hit.fact.text);
    }

    // Vectors: exact top-k with a metadata filter.
    store
        .ensure_collection(alice.namespace(), CollectionSpec::new("notes", 3, "toy-3d"))
        .await?;
    let records = [
        ("a", [1.0, 0.0, 0.0], "en"),
        ("b", [0.9, 0.1, 0.0], "de"),
        ("c", [0.0, 1.0, 0.0], "en"),
    ]
    .into_iter()
    .map(|(id, v, lang)| {
        VectorRecord::new(id.try_into().expect("valid id"), v.to_vec()).with_metadata(
            json!({"lang": lang})
                .as_object()
                .cloned()
                .unwrap_or_default(),
        )
    })
    .collect();
    store.upsert_vectors(&alice, "notes", records).await?;
    let query = VectorQuery::new(vec![1.0, 0.05, 0.0], 2)
        .with_filter(mnemix_core::Filter::eq("lang", "en"));
    for hit in store.search(&alice, "notes", query).await? {
        println!("nearest english note {} ({:.3})", hit.record.id, hit.score);
    }

    // Erasure: one call, with a receipt.
    let receipt = store.forget_all(&alice).await?;
    println!("forget_all removed {} rows: {receipt:?}", receipt.total());
    Ok(())
}
