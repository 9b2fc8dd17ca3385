//! `mnemix changes`: a namespace's change feed as JSON Lines, followed as it grows, and its
//! retention.

use std::io::Write as _;
use std::time::Duration;

use anyhow::{Context as _, Result};
use mnemix_core::changes::MAX_CHANGES_PER_READ;
use mnemix_core::{ChangeCursor, Namespace, Retention, Ttl};

use crate::open::open_existing;
use crate::ui;

/// The arguments of `mnemix changes`.
#[derive(Debug, clap::Args)]
pub struct ChangesArgs {
    /// Print the changes after this cursor (a printed change's `cursor`); without it, from
    /// the oldest kept. A consumer that stops resumes after the last cursor it handled.
    #[arg(long)]
    after: Option<String>,
    /// Print at most this many changes.
    #[arg(long)]
    limit: Option<usize>,
    /// Keep printing changes as they commit, until stopped.
    #[arg(long, conflicts_with = "limit")]
    follow: bool,
    /// How often `--follow` asks for new changes, in milliseconds.
    #[arg(long, default_value_t = 500, requires = "follow")]
    poll_ms: u64,
    /// Instead of printing: remove the changes older than this ("30d", "12h"), then say how
    /// many went. A cursor from before a trim is refused by later reads.
    #[arg(long, conflicts_with_all = ["after", "limit", "follow"])]
    trim_older_than: Option<Ttl>,
    /// Instead of printing: keep only the newest this many changes, then say how many went.
    #[arg(long, conflicts_with_all = ["after", "limit", "follow"])]
    trim_to: Option<u64>,
}

/// Runs `mnemix changes` on the namespace `namespace` of the store at `url`.
pub async fn run(url: &str, namespace: &str, args: ChangesArgs) -> Result<()> {
    let namespace = Namespace::new(namespace)?;
    let store = open_existing(url).await?;
    if args.trim_older_than.is_some() || args.trim_to.is_some() {
        let retention = Retention {
            max_age: args.trim_older_than.map(Ttl::duration),
            max_entries: args.trim_to,
        };
        let removed = store.trim_changes(&namespace, retention).await?;
        ui::good(&format!("removed {removed} changes of {namespace}'s feed"));
        return Ok(());
    }
    let mut after = match &args.after {
        Some(cursor) => cursor.parse().context("--after")?,
        None => ChangeCursor::START,
    };
    let mut left = args.limit.unwrap_or(usize::MAX);
    let mut out = std::io::stdout().lock();
    while left > 0 {
        let page = store
            .changes(&namespace, after, left.min(MAX_CHANGES_PER_READ))
            .await?;
        for change in &page {
            writeln!(out, "{}", serde_json::to_string(change)?)?;
        }
        out.flush()?;
        match page.last() {
            Some(last) => {
                after = last.cursor;
                left -= page.len();
            }
            None if args.follow => tokio::time::sleep(Duration::from_millis(args.poll_ms)).await,
            None => break,
        }
    }
    Ok(())
}
