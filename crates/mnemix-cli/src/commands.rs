//! The operator commands: conformance, migrate, stats, conversations, facts, search, forget.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{bail, Context as _, Result};
use clap::Subcommand;
use mnemix::engine::Memories;
use mnemix_conformance::{BoxFuture, Outcome, ScenarioResult, SetupError};
use mnemix_core::embed::{Embedder as _, HashingEmbedder};
use mnemix_core::registry::{Grant, KindSpec};
use mnemix_core::{
    Clock, ConversationId, ConversationQuery, FactQuery, LoadOptions, MemoryBackend, MemoryError,
    Namespace, RecallQuery, Scope, Subject, VectorQuery,
};

use crate::open::{open, open_existing, open_with_clock, redacted};
use crate::ui;

#[derive(Debug, Subcommand)]
pub enum ConversationsCommand {
    /// A subject's conversations, newest first.
    List {
        /// The subject.
        #[arg(long)]
        subject: String,
        /// Most to show.
        #[arg(long, default_value_t = 50)]
        limit: usize,
    },
    /// One conversation's messages.
    Show {
        /// The subject.
        #[arg(long)]
        subject: String,
        /// The conversation id.
        id: String,
        /// Only the last N messages.
        #[arg(long)]
        last: Option<usize>,
    },
}

#[derive(Debug, Subcommand)]
pub enum FactsCommand {
    /// A subject's current facts, newest first.
    List {
        /// The subject.
        #[arg(long)]
        subject: String,
        /// Include superseded history.
        #[arg(long)]
        history: bool,
        /// Most to show.
        #[arg(long, default_value_t = 50)]
        limit: usize,
    },
    /// Lexical recall, exactly as an agent would get it.
    Recall {
        /// The subject.
        #[arg(long)]
        subject: String,
        /// Most results.
        #[arg(long, default_value_t = 10)]
        limit: usize,
        /// The query text.
        query: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum KindsCommand {
    /// The kinds of structured memory registered in the namespace.
    List,
    /// Registers (or replaces) a kind: its name, the JSON Schema of its data, and the fields
    /// that identify one memory of it.
    Register {
        /// The kind's name (`Preference`).
        name: String,
        /// A file holding the kind's JSON Schema.
        #[arg(long)]
        schema: std::path::PathBuf,
        /// Top-level fields whose values identify a memory (comma-separated).
        #[arg(long, value_delimiter = ',')]
        unique_on: Vec<String>,
    },
    /// Lets one subject (agent) read another's structured memories.
    Grant {
        /// Whose memories.
        #[arg(long)]
        owner: String,
        /// Who may read them.
        #[arg(long)]
        grantee: String,
        /// Only these kinds (comma-separated; default: every kind).
        #[arg(long, value_delimiter = ',')]
        kinds: Vec<String>,
    },
    /// Deletes a kind: storing memories of it is refused until it is registered again (those
    /// stored stay).
    Delete {
        /// The kind's name.
        name: String,
    },
    /// The grants in force in the namespace.
    Grants,
    /// Ends a grant.
    Revoke {
        /// Whose memories.
        #[arg(long)]
        owner: String,
        /// Who may no longer read them.
        #[arg(long)]
        grantee: String,
    },
}

pub async fn kinds(url: &str, namespace: &str, command: KindsCommand) -> Result<()> {
    let store = match command {
        KindsCommand::List | KindsCommand::Grants => open_existing(url).await?,
        _ => open(url).await?,
    };
    let memories = Memories::new(store);
    let namespace = Namespace::new(namespace)?;
    match command {
        KindsCommand::List => {
            let kinds = memories.kinds(&namespace).await?;
            if kinds.is_empty() {
                ui::line(&format!("no kinds registered in {}", namespace.as_str()));
            }
            for kind in kinds {
                let unique = if kind.unique_on.is_empty() {
                    String::new()
                } else {
                    format!("  unique on {}", kind.unique_on.join(", "))
                };
                ui::line(&format!("{}{unique}  {}", kind.name, kind.schema));
            }
        }
        KindsCommand::Register {
            name,
            schema,
            unique_on,
        } => {
            let text = std::fs::read_to_string(&schema)
                .with_context(|| format!("reading {}", schema.display()))?;
            let schema = serde_json::from_str(&text)
                .with_context(|| format!("{} is not JSON", schema.display()))?;
            let spec = KindSpec::new(name.clone(), schema).unique_on(unique_on);
            memories.register_kind(&namespace, spec).await?;
            ui::line(&format!("registered {name} in {}", namespace.as_str()));
        }
        KindsCommand::Grant {
            owner,
            grantee,
            kinds,
        } => {
            let grant = Grant {
                kinds,
                ..Grant::new(Subject::new(owner)?, Subject::new(grantee)?)
            };
            memories.grant(&namespace, grant).await?;
            ui::line("granted");
        }
        KindsCommand::Delete { name } => {
            let deleted = memories.delete_kind(&namespace, &name).await?;
            if !deleted {
                anyhow::bail!("no kind {name:?} is registered in {}", namespace.as_str());
            }
            ui::line(&format!("deleted kind {name} of {}", namespace.as_str()));
        }
        KindsCommand::Grants => {
            let grants = memories.grants(&namespace).await?;
            if grants.is_empty() {
                ui::line(&format!("no grants in {}", namespace.as_str()));
            }
            for grant in grants {
                let kinds = if grant.kinds.is_empty() {
                    "every kind".to_owned()
                } else {
                    grant.kinds.join(", ")
                };
                ui::line(&format!("{} → {}: {kinds}", grant.owner, grant.grantee));
            }
        }
        KindsCommand::Revoke { owner, grantee } => {
            let revoked = memories
                .revoke(&namespace, &Subject::new(owner)?, &Subject::new(grantee)?)
                .await?;
            ui::line(if revoked {
                "revoked"
            } else {
                "there was no such grant"
            });
        }
    }
    Ok(())
}

pub async fn conformance(url: &str, verbose: bool) -> Result<ExitCode> {
    let backend = mnemix::descriptor_for(url)?.name();
    // Fail early, with the real reason, when the URL cannot be opened at all.
    open(url).await?;
    let target = url.to_owned();
    let factory = move |clock: Arc<dyn Clock>| -> BoxFuture<'static, Result<Arc<dyn MemoryBackend>, SetupError>> {
        let url = target.clone();
        Box::pin(async move {
            open_with_clock(&url, clock).await.map_err(|e| {
                SetupError::Failed(MemoryError::Backend {
                    backend: "cli",
                    source: e.into(),
                })
            })
        })
    };
    anstream::println!(
        "running {} scenarios against {}",
        mnemix_conformance::SCENARIOS.len(),
        redacted(url)
    );
    let results =
        mnemix_conformance::run_suite(backend, &factory, |r: &ScenarioResult| match r.outcome {
            Outcome::Passed if verbose => ui::good(r.name),
            Outcome::Passed => {}
            Outcome::Skipped => ui::dim(&format!("SKIP {}: {}", r.name, r.reason)),
            Outcome::Failed => ui::refused(&format!("FAIL {}: {}", r.name, r.reason)),
        })
        .await;
    let mut groups: BTreeMap<&str, [usize; 3]> = BTreeMap::new();
    for r in &results {
        let group = r.name.split("::").next().unwrap_or(r.name);
        let column = match r.outcome {
            Outcome::Passed => 0,
            Outcome::Failed => 1,
            Outcome::Skipped => 2,
        };
        groups.entry(group).or_default()[column] += 1;
    }
    anstream::println!(
        "\n  {:<16} {:>6} {:>6} {:>7}",
        "group",
        "passed",
        "failed",
        "skipped"
    );
    for (group, [p, f, s]) in &groups {
        anstream::println!("  {group:<16} {p:>6} {f:>6} {s:>7}");
    }
    // Every scenario wrote in namespaces of its own, which no one else uses: erase them, so
    // that a run against a team's store leaves it as it was.
    let erased = mnemix_conformance::erase_suite_data(&factory)
        .await
        .map_err(|e| anyhow::anyhow!("erasing the suite's test data: {e:?}"))?;
    anstream::println!(
        "\nremoved the suite's test data: {} namespaces, {} records",
        erased.namespaces,
        erased.receipt.total()
    );
    if erased.left > 0 {
        bail!(
            "{} of the suite's namespaces are still there after erasing them",
            erased.left
        );
    }
    let count = |o: Outcome| results.iter().filter(|r| r.outcome == o).count();
    let failed = count(Outcome::Failed);
    anstream::println!(
        "{backend}: {} passed, {failed} failed, {} skipped",
        count(Outcome::Passed),
        count(Outcome::Skipped)
    );
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

pub async fn migrate(url: &str) -> Result<()> {
    // Every store applies its pending migrations when it opens.
    let store = open(url).await?;
    match store.schema_version().await? {
        Some(version) => ui::good(&format!("{} is at schema version {version}", redacted(url))),
        None => ui::line(&format!(
            "{} ({}) has no versioned schema: nothing to migrate",
            redacted(url),
            store.backend_name()
        )),
    }
    Ok(())
}

fn scope(namespace: &str, subject: &str) -> Result<Scope> {
    Scope::new(namespace, subject).context("bad namespace or subject")
}

pub async fn stats(url: &str, namespace: &str, subject: Option<&str>) -> Result<()> {
    let store = open_existing(url).await?;
    let capabilities = store.capabilities();
    ui::heading(&format!("{} ({})", redacted(url), store.backend_name()));
    let version = store.schema_version().await?;
    ui::line(&format!(
        "schema version   {:>10}",
        version.map_or_else(|| "none".to_owned(), |v| v.to_string())
    ));
    ui::line(&format!("vector search    {}", capabilities.vector_search));
    ui::line(&format!("durability       {}", capabilities.durability));
    let counts = store.table_counts().await?;
    if counts.is_empty() {
        ui::dim("(this backend has no cheap table counts)");
    }
    for (table, rows) in counts {
        ui::line(&format!("{table:<16} {rows:>10}"));
    }
    let Some(subject) = subject else {
        return Ok(());
    };
    let scope = scope(namespace, subject)?;
    ui::heading(&format!("subject {scope}"));
    let mut conversations = 0;
    let mut messages = 0;
    let mut cursor = None;
    loop {
        let page = store
            .list_conversations(
                &scope,
                ConversationQuery::default()
                    .with_limit(1000)
                    .with_cursor(cursor),
            )
            .await?;
        conversations += page.items.len();
        for c in &page.items {
            messages += store.load(&scope, &c.id, LoadOptions::raw()).await?.len();
        }
        cursor = page.next_cursor;
        if cursor.is_none() {
            break;
        }
    }
    let facts = count_facts(store.as_ref(), &scope, false).await?;
    let with_history = count_facts(store.as_ref(), &scope, true).await?;
    ui::line(&format!("conversations    {conversations:>10}"));
    ui::line(&format!("messages         {messages:>10}"));
    ui::line(&format!("facts (current)  {facts:>10}"));
    ui::line(&format!("facts (all)      {with_history:>10}"));
    for spec in store.list_collections(scope.namespace()).await? {
        ui::line(&format!(
            "collection {} ({} dims, {}, model {})",
            spec.name,
            spec.dims,
            spec.metric.as_str(),
            spec.model
        ));
    }
    Ok(())
}

async fn count_facts(store: &dyn MemoryBackend, scope: &Scope, history: bool) -> Result<usize> {
    let mut total = 0;
    let mut cursor = None;
    loop {
        let page = store
            .list_facts(
                scope,
                FactQuery::default()
                    .with_include_superseded(history)
                    .with_limit(1000)
                    .with_cursor(cursor),
            )
            .await?;
        total += page.items.len();
        cursor = page.next_cursor;
        if cursor.is_none() {
            return Ok(total);
        }
    }
}

pub async fn conversations(
    url: &str,
    namespace: &str,
    command: ConversationsCommand,
) -> Result<()> {
    let store = open_existing(url).await?;
    match command {
        ConversationsCommand::List { subject, limit } => {
            let scope = scope(namespace, &subject)?;
            let page = store
                .list_conversations(&scope, ConversationQuery::default().with_limit(limit))
                .await?;
            if page.items.is_empty() {
                ui::line(&format!("{scope} has no conversations"));
            }
            for c in page.items {
                ui::line(&format!(
                    "{:<40} {:>5} messages  {}",
                    c.id.as_str(),
                    c.last_seq,
                    c.title.unwrap_or_default()
                ));
            }
        }
        ConversationsCommand::Show { subject, id, last } => {
            let scope = scope(namespace, &subject)?;
            let id = ConversationId::new(id)?;
            let mut options = LoadOptions::raw();
            options.last = last;
            let messages = store.load(&scope, &id, options).await?;
            if messages.is_empty() {
                ui::line(&format!("conversation {id} of {scope} has no messages"));
            }
            for m in messages {
                ui::message(m.seq, m.message.role.as_str(), &describe(&m.message));
            }
        }
    }
    Ok(())
}

/// A message's text, or a summary of its non-text parts.
pub fn describe(message: &mnemix_core::Message) -> String {
    let text = message.text();
    if !text.is_empty() {
        return text;
    }
    serde_json::to_string(&message.parts).unwrap_or_default()
}

pub async fn facts(url: &str, namespace: &str, command: FactsCommand) -> Result<()> {
    let store = open_existing(url).await?;
    match command {
        FactsCommand::List {
            subject,
            history,
            limit,
        } => {
            let scope = scope(namespace, &subject)?;
            let page = store
                .list_facts(
                    &scope,
                    FactQuery::default()
                        .with_include_superseded(history)
                        .with_limit(limit),
                )
                .await?;
            if page.items.is_empty() {
                ui::line(&format!("{scope} has no facts"));
            }
            for f in page.items {
                let status = if f.is_current() { "" } else { "  (superseded)" };
                ui::line(&format!(
                    "{}  {}  {}  [{}] {}{status}",
                    f.id,
                    crate::ui::utc_minute(f.created_at),
                    f.key.as_deref().unwrap_or("-"),
                    f.tags.join(","),
                    f.text
                ));
            }
        }
        FactsCommand::Recall {
            subject,
            limit,
            query,
        } => {
            let scope = scope(namespace, &subject)?;
            let hits = store
                .recall(&scope, RecallQuery::text(query.clone()).with_limit(limit))
                .await?;
            if hits.is_empty() {
                ui::line(&format!("no fact of {scope} matches {query:?}"));
            }
            for hit in hits {
                ui::line(&format!("{:.2}  {}", hit.relevance, hit.fact.text));
            }
        }
    }
    Ok(())
}

pub async fn search(
    url: &str,
    namespace: &str,
    subject: &str,
    collection: &str,
    k: usize,
    query: &str,
) -> Result<()> {
    let store = open_existing(url).await?;
    let scope = scope(namespace, subject)?;
    let embedder = HashingEmbedder::default();
    let specs = store.list_collections(scope.namespace()).await?;
    let Some(spec) = specs.iter().find(|s| s.name == collection) else {
        bail!("no collection {collection:?} in namespace {namespace:?}");
    };
    if spec.model != embedder.model_id() {
        bail!(
            "collection {collection:?} holds vectors of model {:?}; this command embeds with {:?}",
            spec.model,
            embedder.model_id()
        );
    }
    let hits = store
        .search(
            &scope,
            collection,
            VectorQuery::new(embedder.embed_one(query), k),
        )
        .await?;
    if hits.is_empty() {
        ui::line(&format!(
            "nothing of {scope} in collection {collection:?} is near {query:?}"
        ));
    }
    for hit in hits {
        // Where a hit comes from: a message's conversation and seq, as the engine records them.
        let metadata = &hit.record.metadata;
        let origin = match (metadata.get("conversation_id"), metadata.get("seq")) {
            (Some(serde_json::Value::String(conversation)), Some(seq)) => {
                format!("{conversation} #{seq}")
            }
            _ => hit.record.id.to_string(),
        };
        ui::line(&format!(
            "{:.3}  {origin}  {}",
            hit.score,
            hit.record.text.as_deref().unwrap_or_default()
        ));
    }
    Ok(())
}

pub async fn forget(url: &str, namespace: &str, subject: &str, yes: bool) -> Result<()> {
    let scope = scope(namespace, subject)?;
    if !yes {
        // A dry run: what --yes would erase, counted as its receipt will count it.
        let store = open_existing(url).await?;
        let owned = store.count_owned(&scope).await?;
        let mut counts: Vec<String> = owned
            .counts()
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(kind, n)| format!("{n} {kind}"))
            .collect();
        if owned.changes > 0 {
            counts.push(format!(
                "and scrubs it from {} changes of the feed",
                owned.changes
            ));
        }
        ui::line(&format!(
            "dry run, nothing erased: with --yes this erases what {scope} owns in {}: {}",
            redacted(url),
            if counts.is_empty() {
                "nothing (it owns no records)".to_owned()
            } else {
                counts.join(", ")
            }
        ));
        return Ok(());
    }
    let receipt = open(url).await?.forget_all(&scope).await?;
    ui::good(&format!(
        "erased {scope}: {}",
        serde_json::to_string(&receipt)?
    ));
    Ok(())
}
