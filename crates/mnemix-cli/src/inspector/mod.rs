//! `mnemix ui`: a web inspector over any store the command opens, rendered on the server with
//! no JavaScript at all, so every page reads in any browser and the Content-Security-Policy
//! allows no script.
//!
//! Who may call what (every route passes the guard of `access.rs` first):
//! - Every request: its `Host` must be one the server answers to (the loopback names and
//!   `--allowed-host`), which stops DNS rebinding; no response carries CORS headers.
//! - `GET /login`, `POST /login`, `GET /static/…`: anyone who reaches the port. A key
//!   (`--keys`, the MCP server's key file) is exchanged for an HttpOnly, SameSite=Strict session
//!   cookie; the key is never put in a URL, a page or a log.
//! - Every other `GET`: a session (or, with no `--keys`, anyone on the loopback). A scoped key
//!   sees its own scope and nothing else; an admin key any namespace. A page of a scope the
//!   viewer may not see is 404, as one that does not exist.
//! - Every `POST` (logout, a working-memory edit, an erasure): the session's CSRF token, and an
//!   `Origin` / `Sec-Fetch-Site` of this server; the edits and erasures also need `--writable`.
//!
//! [`router`] is the whole inspector as an axum `Router`, for a program that serves it itself
//! (the benchmarks time its pages through it):
//!
//! ```no_run
//! # async fn serve() -> anyhow::Result<()> {
//! use std::sync::Arc;
//! use mnemix_cli::inspector::{default_memory_config, router, Inspector, Settings};
//!
//! let store = mnemix::open("sqlite://./.mnemix/memory.db").await?.backend();
//! let settings = Settings::new(default_memory_config()); // no keys: loopback only, read-only
//! let app = router(Arc::new(Inspector::new(store, settings)?));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8732").await?;
//! axum::serve(listener, app).await?;
//! # Ok(()) }
//! ```

mod access;
mod pages;
mod view;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context as _, Result};
use axum::middleware;
use axum::routing::{get, post};
use axum::Router;
use clap::Args;
use mnemix::engine::config::MemoryConfig;
use mnemix::engine::{Memories, Memory};
use mnemix_core::embed::{Embedder, HashingEmbedder};
use mnemix_core::{MemoryBackend, Origin, Provenance, Ttl};

use crate::mcp::connections::{self, ConnectionLimits};
use crate::mcp::KeyRing;
use access::{Access, Sessions};

/// `mnemix ui …`
#[derive(Debug, Args)]
pub struct UiArgs {
    /// The address to serve on. Off the loopback, `--keys` is required, and keys travel in clear
    /// unless a TLS proxy is in front.
    #[arg(long, default_value = "127.0.0.1:8732", value_name = "ADDR")]
    bind: String,
    /// The key file to log in with (the MCP server's; make keys with `mnemix mcp key`). Without
    /// it, anyone who reaches the loopback port sees every namespace.
    #[arg(long)]
    keys: Option<PathBuf>,
    /// Allow the pages' writes: working-memory edits (compare-and-set) and erasures. Read-only
    /// without it.
    #[arg(long)]
    writable: bool,
    /// A Host header to accept besides the loopback names (repeat for several); needed when
    /// browsers reach the server by another name.
    #[arg(long = "allowed-host")]
    allowed_hosts: Vec<String>,
    /// The agent's memory configuration (JSON, YAML or TOML, as `Memory` reads it), so that
    /// "recall, explained" builds the context the agent would. Default: the window, semantic
    /// recall and facts on.
    #[arg(long, value_name = "FILE")]
    memory_config: Option<PathBuf>,
    /// A session unused for this long is ended ("15m", "1h").
    #[arg(long, default_value = "30m")]
    session_idle: Ttl,
}

/// What every page reads from.
pub struct Inspector {
    store: Arc<dyn MemoryBackend>,
    memories: Memories,
    memory: Memory,
    access: Access,
    sessions: Sessions,
    writable: bool,
    hosts: Vec<String>,
}

/// How an inspector is set up.
#[non_exhaustive]
pub struct Settings {
    /// The keys to log in with; `None`: no login (loopback only).
    pub keys: Option<KeyRing>,
    /// Whether writes are allowed.
    pub writable: bool,
    /// Host names accepted besides the loopback's.
    pub allowed_hosts: Vec<String>,
    /// The agent's memory configuration, for "recall, explained".
    pub memory_config: MemoryConfig,
    /// How long an unused session lives.
    pub session_idle: std::time::Duration,
}

impl Settings {
    /// No key file (loopback only), read-only, the loopback host names, sessions ended after
    /// 30 minutes unused, and `memory_config` for "recall, explained".
    pub fn new(memory_config: MemoryConfig) -> Self {
        Self {
            keys: None,
            writable: false,
            allowed_hosts: Vec::new(),
            memory_config,
            session_idle: std::time::Duration::from_mins(30),
        }
    }
}

impl Inspector {
    /// The store writing as `viewer`: what every change a page makes records as its writer.
    fn written_by(&self, viewer: &access::Viewer) -> Arc<dyn MemoryBackend> {
        let writer = Provenance::new(viewer.writer.clone(), Origin::Api);
        self.store
            .acting_as(writer)
            .unwrap_or_else(|| Arc::clone(&self.store))
    }

    /// An inspector over `store`.
    pub fn new(store: Arc<dyn MemoryBackend>, settings: Settings) -> Result<Self> {
        // The embedder `mnemix mcp` and `mnemix search` use, so that recall here finds what
        // they stored; an agent with a model of its own passes its config's collection.
        let embedder: Arc<dyn Embedder> = Arc::new(HashingEmbedder::default());
        let memory = Memory::builder(Arc::clone(&store))
            .config(settings.memory_config)
            .embedder(embedder)
            .build()
            .context("the memory configuration")?;
        let mut hosts: Vec<String> = vec!["localhost".into(), "127.0.0.1".into(), "[::1]".into()];
        hosts.extend(settings.allowed_hosts);
        Ok(Self {
            memories: Memories::new(Arc::clone(&store)),
            store,
            memory,
            access: settings
                .keys
                .map_or(Access::Open, |keys| Access::Keys(Box::new(keys))),
            sessions: Sessions::new(settings.session_idle),
            writable: settings.writable,
            hosts,
        })
    }
}

/// The recall configuration "recall, explained" uses when none is given: the window, semantic
/// recall over the conversation and the facts tier.
pub fn default_memory_config() -> MemoryConfig {
    let mut config = MemoryConfig::default();
    config.conversation.enabled = true;
    config.semantic_recall.enabled = true;
    config.facts.enabled = true;
    config
}

/// Every route of the inspector, behind the guard.
pub fn router(inspector: Arc<Inspector>) -> Router {
    Router::new()
        .route("/", get(pages::home))
        .route("/login", get(access::login_page).post(access::login))
        .route("/logout", post(access::logout))
        .route("/static/style.css", get(view::stylesheet))
        .route("/ns/{ns}", get(pages::namespace))
        .route("/ns/{ns}/kinds", get(pages::kinds))
        .route("/s/{ns}/{subject}", get(pages::subject))
        .route("/s/{ns}/{subject}/conversations", get(pages::conversations))
        .route(
            "/s/{ns}/{subject}/conversations/{id}",
            get(pages::conversation),
        )
        .route("/s/{ns}/{subject}/facts", get(pages::facts))
        .route("/s/{ns}/{subject}/facts/history", get(pages::fact_history))
        .route(
            "/s/{ns}/{subject}/working",
            get(pages::working_memory).post(pages::edit_working_memory),
        )
        .route("/s/{ns}/{subject}/recall", get(pages::recall))
        .route(
            "/s/{ns}/{subject}/erase",
            get(pages::erase_preview).post(pages::erase),
        )
        .route("/s/{ns}/{subject}/export", get(pages::export))
        .route("/s/{ns}/{subject}/stores", get(pages::stores))
        .fallback(pages::not_found)
        .layer(middleware::from_fn_with_state(
            Arc::clone(&inspector),
            access::guard,
        ))
        .with_state(inspector)
}

/// Runs `mnemix ui`.
pub(crate) async fn run(url: &str, args: UiArgs) -> Result<()> {
    let listener = tokio::net::TcpListener::bind(&args.bind)
        .await
        .with_context(|| format!("cannot listen on {}", args.bind))?;
    let bound: SocketAddr = listener.local_addr()?;
    if !bound.ip().is_loopback() && args.keys.is_none() {
        bail!("ui on {bound} (off the loopback) needs --keys FILE: every visitor must log in");
    }
    let keys = args.keys.as_deref().map(KeyRing::load).transpose()?;
    let memory_config = match &args.memory_config {
        Some(path) => MemoryConfig::from_path(path)
            .with_context(|| format!("cannot read {}", path.display()))?,
        None => default_memory_config(),
    };
    let store = crate::open::open_existing(url).await?;
    let inspector = Arc::new(Inspector::new(
        store,
        Settings {
            keys,
            writable: args.writable,
            allowed_hosts: args.allowed_hosts,
            memory_config,
            session_idle: args.session_idle.duration(),
        },
    )?);
    eprintln!(
        "mnemix ui on http://{bound}/ ({}, {})",
        crate::open::redacted(url),
        if args.writable {
            "writable"
        } else {
            "read-only"
        }
    );
    if !bound.ip().is_loopback() {
        eprintln!(
            "warning: plain HTTP on {bound}: keys and session cookies travel in clear unless a TLS proxy is in front"
        );
    }
    let watch = tokio::spawn(access::watch_keys(Arc::clone(&inspector)));
    connections::serve(
        listener,
        router(Arc::clone(&inspector)),
        ConnectionLimits::default(),
        async {
            let _ = tokio::signal::ctrl_c().await;
        },
    )
    .await;
    watch.abort();
    Ok(())
}

#[cfg(test)]
mod tests;
