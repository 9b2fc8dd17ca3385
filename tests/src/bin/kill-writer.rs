//! The child process of the kill tests (`tests/kills.rs`): opens the store at a URL and, from
//! batch `FROM` on, appends batch `k` (three messages with ids `b{k}-0..2`) to conversation
//! `kills`, then remembers `fact {k}`, writing `a k` or `r k` to the acknowledgement file as soon
//! as each call returns `Ok` — until it is killed.
//!
//! `kill-writer URL NAMESPACE SUBJECT FROM ACK_FILE`

use std::io::Write as _;

use agent_memory::{
    AppendOptions, ConversationId, MemoryError, Message, MessageId, NewConversation, NewFact,
    RememberOptions, Scope,
};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), MemoryError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [url, namespace, subject, from, acks] = args.as_slice() else {
        return Err(MemoryError::invalid(
            "usage: kill-writer URL NAMESPACE SUBJECT FROM ACK_FILE",
        ));
    };
    let from: u64 = from
        .parse()
        .map_err(|_| MemoryError::invalid("FROM is a batch number"))?;
    let mut acks = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(acks)
        .map_err(|e| MemoryError::invalid(format!("{acks}: {e}")))?;
    let mut ack = |line: String| {
        // Unbuffered: a line written is in the kernel's hands when the call returns, so a
        // SIGKILL after it cannot take it back.
        acks.write_all(line.as_bytes())
            .expect("the acknowledgement is written");
    };
    let store = agent_memory::open(url).await?;
    let scope = Scope::new(namespace.as_str(), subject.as_str())?;
    let id = ConversationId::new("kills")?;
    let new = NewConversation {
        id: Some(id.clone()),
        ..NewConversation::default()
    };
    match store.create_conversation(&scope, new).await {
        Ok(_) | Err(MemoryError::AlreadyExists { .. }) => {}
        Err(e) => return Err(e),
    }
    for k in from.. {
        let batch = (0..3)
            .map(|i| {
                Ok(Message::user(format!("batch {k} message {i}"))
                    .with_id(MessageId::new(format!("b{k}-{i}"))?))
            })
            .collect::<Result<Vec<_>, MemoryError>>()?;
        store
            .append(&scope, &id, batch, AppendOptions::default())
            .await?;
        ack(format!("a {k}\n"));
        store
            .remember(
                &scope,
                NewFact::new(format!("fact {k}")),
                RememberOptions::default(),
            )
            .await?;
        ack(format!("r {k}\n"));
    }
    Ok(())
}
