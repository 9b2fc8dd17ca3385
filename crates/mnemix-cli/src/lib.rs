//! `mnemix`: try, inspect, test and move agent memory from the command line.
//!
//! `--url` picks the backend by scheme (`sqlite://`, `memory://`, …); the default is the SQLite
//! file `./.mnemix/memory.db` (in a libSQL build, `./.mnemix/mnemix-libsql.db`). Run `mnemix --help` for the commands.
//!
//! The library is the command, so that a program of your own can be the `mnemix` command with
//! your adapter in it: register its descriptor, then hand over to [`main`].
//!
//! ```ignore
//! fn main() -> std::process::ExitCode {
//!     mnemix::register(my_adapter::DESCRIPTOR).expect("a scheme of its own");
//!     mnemix_cli::main() // `--url myscheme://…` now opens your store, for every command
//! }
//! ```

mod changes;
mod commands;
mod demo;
pub mod inspector;
mod mcp;
mod open;
mod transfer;
mod ui;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// Agent memory on the database you already run.
#[derive(Debug, Parser)]
#[command(name = "mnemix", version, about, propagate_version = true)]
struct Cli {
    /// Where the memory lives: sqlite://FILE, sqlite::memory:, memory://, postgres://…,
    /// redis://…, redis+cluster://…, or in a libSQL build file:FILE, libsql::memory:,
    /// libsql://HOST. Default: sqlite://./.mnemix/memory.db (libSQL build:
    /// file:./.mnemix/mnemix-libsql.db)
    #[arg(long, global = true, env = "MNEMIX_URL")]
    url: Option<String>,

    /// Namespace (tenant) to work in [default: `default`; export, copy and verify: every
    /// namespace].
    #[arg(long, global = true)]
    namespace: Option<String>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// A scripted tour: two conversations, a crash, a forged continuation, facts, working memory,
    /// semantic search and erasure. Run it twice: the second run finds the first run's data.
    Demo,
    /// Run the conformance suite against the backend of `--url` (required here: scenarios write
    /// into fresh random namespaces `t…`, erased at the end) and print the matrix.
    Conformance {
        /// Print every scenario, not only failures and skips.
        #[arg(long)]
        verbose: bool,
    },
    /// Apply pending schema migrations and print the schema version.
    Migrate,
    /// Counts of what a subject owns (and, on SQLite, of every table).
    Stats {
        /// The subject; without it only store-wide figures are shown.
        #[arg(long)]
        subject: Option<String>,
    },
    /// List or show conversations.
    #[command(subcommand)]
    Conversations(commands::ConversationsCommand),
    /// Kinds of structured memory and the grants that share memories between agents.
    #[command(subcommand)]
    Kinds(commands::KindsCommand),
    /// List or recall facts.
    #[command(subcommand)]
    Facts(commands::FactsCommand),
    /// Semantic search in a vector collection, with the offline embedder.
    Search {
        /// The subject whose vectors to search.
        #[arg(long)]
        subject: String,
        /// The collection.
        #[arg(long, default_value = "messages")]
        collection: String,
        /// How many hits.
        #[arg(long, short = 'k', default_value_t = 5)]
        k: usize,
        /// The query text.
        query: String,
    },
    /// Write every record (of `--namespace`, or of every namespace) as JSON Lines.
    Export {
        /// The file to write; `-` is stdout.
        #[arg(long, short = 'o', default_value = "-")]
        output: PathBuf,
    },
    /// Restore an export into the store of `--url` (records with the same identity are
    /// replaced, so importing twice is harmless). The whole file is checked first (its trailer's
    /// count and SHA-256, every record): a cut, changed or invalid file restores nothing. Then
    /// each scope is restored in one transaction.
    Import {
        /// The export to read; `-` is stdin.
        input: PathBuf,
        /// Restore the records of a file whose trailer is missing or does not match (an export
        /// cut short or edited, or one written before trailers): what it holds, nothing more.
        #[arg(long)]
        accept_unverified: bool,
    },
    /// Copy every record from one store to another, one scope per transaction.
    Copy {
        /// The source URL.
        #[arg(long)]
        from: String,
        /// The target URL.
        #[arg(long)]
        to: String,
        /// Afterwards, compare both stores scope by scope (counts and SHA-256 of the records).
        #[arg(long)]
        verify: bool,
    },
    /// Compare two stores scope by scope without writing (counts and SHA-256 of the records);
    /// fails when any scope differs.
    Verify {
        /// The source URL (its scopes are the ones compared).
        #[arg(long)]
        from: String,
        /// The URL to compare with.
        #[arg(long)]
        to: String,
    },
    /// Serve the memory to AI agents as an MCP server: over stdio for one user
    /// (`--subject`), or over streamable HTTP (`--http ADDR --keys FILE`) for many, each bearer
    /// key bound to its own scope. `mcp key` makes keys.
    Mcp(mcp::McpArgs),
    /// A web inspector: browse namespaces, subjects, conversations (raw beside what a model is
    /// replayed), facts and their history, working memory, kinds and grants, and see why recall
    /// chose what it did. Read-only unless `--writable`; log in with a key of `--keys`.
    Ui(inspector::UiArgs),
    /// Print the namespace's change feed, one JSON line per write, oldest first: what was
    /// done, to which ids, in which subject's scope, by whom and when (never memory text).
    /// `--follow` keeps printing as writes commit; `--after CURSOR` resumes a consumer.
    Changes(changes::ChangesArgs),
    /// Erase everything a subject owns and print the receipt.
    Forget {
        /// The subject to erase.
        #[arg(long)]
        subject: String,
        /// Do it (without this flag nothing is deleted).
        #[arg(long)]
        yes: bool,
    },
}

/// Runs the `mnemix` command on this process's arguments, as the `mnemix` binary does.
pub fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(error) => {
            anstream::eprintln!(
                "{}error:{} {}",
                ui::BAD.render(),
                ui::BAD.render_reset(),
                said_once(&error)
            );
            std::process::ExitCode::FAILURE
        }
    }
}

/// An error and its causes, each said once: drivers often repeat their source in their own
/// message ("error connecting to server: error connecting to server: …", "db error: db error:"),
/// so a cause already said is left out, and so is a part repeating the one before it.
fn said_once(error: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in error.chain() {
        for part in cause.to_string().split(": ") {
            if parts.last().is_none_or(|last| last != part) && !parts.iter().any(|p| p == part) {
                parts.push(part.to_owned());
            }
        }
    }
    parts.join(": ")
}

async fn run(cli: Cli) -> anyhow::Result<std::process::ExitCode> {
    let only = cli.namespace.as_deref();
    let ns = only.unwrap_or(mnemix_core::Namespace::DEFAULT);
    if let Command::Conformance { verbose } = cli.command {
        let Some(url) = cli.url else {
            anyhow::bail!(
                "conformance needs an explicit --url: it writes test data into the store"
            );
        };
        return commands::conformance(&url, verbose).await;
    }
    let url = cli.url.as_deref().unwrap_or(open::DEFAULT_URL);
    match cli.command {
        Command::Demo => demo::run(url).await?,
        Command::Conformance { .. } => unreachable!("handled above"),
        Command::Migrate => commands::migrate(url).await?,
        Command::Stats { subject } => commands::stats(url, ns, subject.as_deref()).await?,
        Command::Conversations(command) => commands::conversations(url, ns, command).await?,
        Command::Facts(command) => commands::facts(url, ns, command).await?,
        Command::Kinds(command) => commands::kinds(url, ns, command).await?,
        Command::Search {
            subject,
            collection,
            k,
            query,
        } => commands::search(url, ns, &subject, &collection, k, &query).await?,
        Command::Mcp(args) => mcp::run(url, ns, args).await?,
        Command::Ui(args) => inspector::run(url, args).await?,
        Command::Forget { subject, yes } => commands::forget(url, ns, &subject, yes).await?,
        Command::Changes(args) => changes::run(url, ns, args).await?,
        Command::Export { output } => transfer::export(url, only, &output).await?,
        Command::Import {
            input,
            accept_unverified,
        } => transfer::import(url, &input, accept_unverified).await?,
        Command::Copy { from, to, verify } => transfer::copy(&from, &to, only, verify).await?,
        Command::Verify { from, to } => transfer::verify(&from, &to, only).await?,
    }
    Ok(std::process::ExitCode::SUCCESS)
}
