//! Killed writers, for every backend's kill test: a child process runs [`write_until_killed`]
//! and is SIGKILLed at a random moment by [`kill_again_and_again`], which then opens the store
//! afresh and [`check`]s it against what the child had acknowledged — again and again.
//!
//! The child appends batch `k` (three messages with ids `b{k}-0..2`) to conversation `kills`,
//! then remembers `fact {k}`, writing `a k` or `r k` to an acknowledgement file as soon as each
//! call returns `Ok`. After a kill, every acknowledged batch must be stored exactly once, no
//! batch in part, seqs contiguous, and every acknowledged fact there once. Only what the child
//! wrote after a call returned is trusted; the store's content decides.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::io::Write as _;
use std::path::Path;
use std::process::Child;
use std::sync::Arc;
use std::time::Duration;

use mnemix_core::{
    AppendOptions, ConversationId, FactQuery, LoadOptions, MemoryBackend, MemoryError, Message,
    MessageId, NewConversation, NewFact, RememberOptions, Result, Scope,
};

/// The conversation the child appends to.
pub const CONVERSATION: &str = "kills";

/// What the kills found, summed over every kill of one backend.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Tally {
    /// Kills done.
    pub kills: u64,
    /// Batches the child acknowledged.
    pub acknowledged: u64,
    /// Acknowledged batches not stored.
    pub lost: u64,
    /// Batches stored in part.
    pub partial: u64,
    /// Batches stored more than once.
    pub duplicated: u64,
    /// Facts the child acknowledged.
    pub facts_acknowledged: u64,
    /// Acknowledged facts not stored.
    pub facts_lost: u64,
    /// Facts stored more than once.
    pub facts_duplicated: u64,
}

impl Tally {
    /// The figures as one JSON object (RELIABILITY.md's row), tagged with `backend`.
    pub fn to_json(&self, backend: &str) -> serde_json::Value {
        serde_json::json!({
            "test": "kills", "backend": backend, "kills": self.kills,
            "acknowledged": self.acknowledged, "lost": self.lost, "partial": self.partial,
            "duplicated": self.duplicated, "facts_acknowledged": self.facts_acknowledged,
            "facts_lost": self.facts_lost, "facts_duplicated": self.facts_duplicated,
        })
    }

    /// Panics unless the child got batches through and nothing was lost, torn or doubled.
    pub fn assert_clean(&self, backend: &str) {
        assert!(
            self.acknowledged > 0,
            "{backend}: the writer got batches through"
        );
        assert_eq!(
            (self.lost, self.partial, self.duplicated),
            (0, 0, 0),
            "{backend}: {self:?}"
        );
        assert_eq!(
            (self.facts_lost, self.facts_duplicated),
            (0, 0),
            "{backend}: {self:?}"
        );
    }
}

/// The child's loop: from batch `from` on, append a batch and remember a fact, acknowledging
/// each in `acks` as soon as it returns; returns only on an error.
pub async fn write_until_killed(
    backend: &dyn MemoryBackend,
    scope: &Scope,
    from: u64,
    acks: &Path,
) -> Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(acks)
        .map_err(|e| MemoryError::invalid(format!("{}: {e}", acks.display())))?;
    let mut ack = |line: String| {
        // Unbuffered: a line written is in the kernel's hands when the call returns, so a
        // SIGKILL after it cannot take it back.
        file.write_all(line.as_bytes())
            .expect("the acknowledgement is written");
    };
    let id = ConversationId::new(CONVERSATION)?;
    let new = NewConversation::default().with_id(id.clone());
    match backend.create_conversation(scope, new).await {
        Ok(_) | Err(MemoryError::AlreadyExists { .. }) => {}
        Err(e) => return Err(e),
    }
    for k in from.. {
        let batch = (0..3)
            .map(|i| {
                Ok(Message::user(format!("batch {k} message {i}"))
                    .with_id(MessageId::new(format!("b{k}-{i}"))?))
            })
            .collect::<Result<Vec<_>>>()?;
        backend
            .append(scope, &id, batch, AppendOptions::default())
            .await?;
        ack(format!("a {k}\n"));
        backend
            .remember(
                scope,
                NewFact::new(format!("fact {k}")),
                RememberOptions::default(),
            )
            .await?;
        ack(format!("r {k}\n"));
    }
    Ok(())
}

/// Acknowledged batches and facts, from the child's file.
fn acknowledged(path: &Path) -> (BTreeSet<u64>, BTreeSet<u64>) {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let (mut batches, mut facts) = (BTreeSet::new(), BTreeSet::new());
    for line in text.lines() {
        match line.split_once(' ') {
            Some(("a", k)) => batches.insert(k.parse().expect("a batch number")),
            Some(("r", k)) => facts.insert(k.parse().expect("a batch number")),
            _ => panic!("a torn acknowledgement line: {line:?}"),
        };
    }
    (batches, facts)
}

/// Checks the store against what was acknowledged, into `tally`; returns the next batch
/// number the child should write.
pub async fn check(
    backend: &dyn MemoryBackend,
    scope: &Scope,
    acks: &Path,
    tally: &mut Tally,
) -> u64 {
    let id = ConversationId::new(CONVERSATION).expect("an id");
    let stored = match backend.load(scope, &id, LoadOptions::raw()).await {
        Ok(stored) => stored,
        // Killed before the conversation was made.
        Err(e) if e.is_not_found() => Vec::new(),
        Err(e) => panic!("load after a kill: {e}"),
    };
    let seqs: Vec<u64> = stored.iter().map(|m| m.seq).collect();
    assert_eq!(
        seqs,
        (1..=stored.len() as u64).collect::<Vec<_>>(),
        "seqs are contiguous"
    );
    // batch → positions of its messages.
    let mut batches: BTreeMap<u64, Vec<(usize, u64)>> = BTreeMap::new();
    for (at, m) in stored.iter().enumerate() {
        let (batch, part) = m.message.id.as_str()[1..]
            .split_once('-')
            .expect("an id b{k}-{i}");
        batches
            .entry(batch.parse().expect("k"))
            .or_default()
            .push((at, part.parse().expect("i")));
    }
    let (acked, facts_acked) = acknowledged(acks);
    tally.acknowledged = acked.len() as u64;
    tally.lost = acked.iter().filter(|k| !batches.contains_key(k)).count() as u64;
    tally.partial = 0;
    tally.duplicated = 0;
    for parts in batches.values() {
        let whole = parts.len() == 3
            && parts
                .iter()
                .enumerate()
                .all(|(i, (at, part))| *part == i as u64 && *at == parts[0].0 + i);
        if parts.len() > 3 {
            tally.duplicated += 1;
        } else if !whole {
            tally.partial += 1;
        }
    }
    let mut facts: BTreeMap<u64, u64> = BTreeMap::new();
    let mut cursor = None;
    loop {
        let query = FactQuery::default()
            .with_include_superseded(true)
            .with_limit(1000)
            .with_cursor(cursor.take());
        let page = backend.list_facts(scope, query).await.expect("facts list");
        for fact in page.items {
            let k = fact.text.strip_prefix("fact ").expect("a fact k");
            *facts.entry(k.parse().expect("k")).or_default() += 1;
        }
        cursor = page.next_cursor;
        if cursor.is_none() {
            break;
        }
    }
    tally.facts_acknowledged = facts_acked.len() as u64;
    tally.facts_lost = facts_acked
        .iter()
        .filter(|k| !facts.contains_key(k))
        .count() as u64;
    tally.facts_duplicated = facts.values().filter(|n| **n > 1).count() as u64;
    let highest = batches.keys().chain(&acked).max().copied();
    highest.map_or(0, |k| k + 1)
}

/// How many kills a kill test makes: `MNEMIX_KILLS`, 10 by default (`cargo xtask reliability`
/// makes 100).
pub fn kills_from_env() -> u64 {
    std::env::var("MNEMIX_KILLS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(10)
}

/// Starts a child with `spawn(from, acks)`, SIGKILLs it 20–400 ms later (while it opens and
/// migrates, between calls, inside them), opens the store with `reopen` and checks it; `kills`
/// times. `acks` is the acknowledgement file the child writes.
pub async fn kill_again_and_again<S, R, F>(
    kills: u64,
    scope: &Scope,
    acks: &Path,
    mut spawn: S,
    mut reopen: R,
) -> Tally
where
    S: FnMut(u64, &Path) -> Child,
    R: FnMut() -> F,
    F: Future<Output = Arc<dyn MemoryBackend>>,
{
    let mut tally = Tally::default();
    let mut next = 0;
    for _ in 0..kills {
        let mut child = spawn(next, acks);
        tokio::time::sleep(Duration::from_millis(fastrand::u64(20..400))).await;
        if let Some(status) = child.try_wait().expect("the writer's status") {
            panic!("the writer ended by itself ({status}) before it was killed");
        }
        child.kill().expect("SIGKILL");
        child.wait().expect("the writer is reaped");
        tally.kills += 1;
        let backend = reopen().await;
        next = check(backend.as_ref(), scope, acks, &mut tally).await;
    }
    tally
}
