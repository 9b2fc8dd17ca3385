//! `agent-memory mcp`: the memory as an MCP server, over stdio or streamable HTTP.

mod keys;
mod tools;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context as _, Result};
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use clap::{Args, Subcommand};
use memory_core::embed::{Embedder, HashingEmbedder};
use memory_core::Scope;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::ServiceExt as _;

pub use keys::{Grant, KeyFile, Keys};
pub use tools::{MemoryTools, ScopeSource, Tenant};

/// The header an admin key names the namespace with.
pub const NAMESPACE_HEADER: &str = "x-memory-namespace";
/// The header an admin key names the subject with.
pub const SUBJECT_HEADER: &str = "x-memory-subject";

/// `agent-memory mcp …`
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct McpArgs {
    #[command(subcommand)]
    command: Option<McpCommand>,
    #[command(flatten)]
    serve: ServeArgs,
}

#[derive(Debug, Subcommand)]
enum McpCommand {
    /// Make a bearer key for the HTTP server: prints the key once, stores only its SHA-256.
    Key {
        /// The key file the server reads (`--keys` of `mcp --http`).
        #[arg(long)]
        keys: PathBuf,
        /// The subject the key is bound to (its namespace is `--namespace`).
        #[arg(long, required_unless_present = "admin")]
        subject: Option<String>,
        /// An admin key instead: any scope, named by the X-Memory-Namespace and
        /// X-Memory-Subject headers of each request.
        #[arg(long, conflicts_with = "subject")]
        admin: bool,
        /// Who holds it, for people reading the key file.
        #[arg(long)]
        label: Option<String>,
    },
}

#[derive(Debug, Args)]
struct ServeArgs {
    /// Serve streamable HTTP on this address (e.g. 127.0.0.1:8731) instead of stdio.
    #[arg(long, value_name = "ADDR")]
    http: Option<SocketAddr>,
    /// Over HTTP: the key file (make keys with `agent-memory mcp key`).
    #[arg(long, requires = "http")]
    keys: Option<PathBuf>,
    /// Over HTTP: a Host header to accept besides localhost (repeat for several); needed when
    /// clients reach the server by another name.
    #[arg(long = "allowed-host", requires = "http")]
    allowed_hosts: Vec<String>,
    /// Over stdio: whose memory this server serves (its namespace is `--namespace`).
    #[arg(long, conflicts_with = "http")]
    subject: Option<String>,
}

/// Runs `agent-memory mcp`.
pub async fn run(url: &str, namespace: &str, args: McpArgs) -> Result<()> {
    if let Some(McpCommand::Key {
        keys,
        subject,
        admin,
        label,
    }) = args.command
    {
        return make_key(&keys, namespace, subject.as_deref(), admin, label);
    }
    let store = agent_memory::open(url)
        .await
        .with_context(|| format!("cannot open {}", agent_memory::redacted(url)))?;
    // The offline embedder, as `agent-memory search` and the demo use: semantic search over
    // what this server remembered works with no model and no network.
    let embedder: Arc<dyn Embedder> = Arc::new(HashingEmbedder::default());
    let serve = args.serve;
    match serve.http {
        None => {
            let Some(subject) = serve.subject else {
                bail!("mcp over stdio needs --subject: whose memory this server serves");
            };
            let scope = Scope::new(namespace, subject)?;
            let tools = MemoryTools::new(store, embedder, ScopeSource::Fixed(scope));
            let running = tools
                .serve(rmcp::transport::stdio())
                .await
                .context("the MCP client did not initialize")?;
            running.waiting().await?;
        }
        Some(address) => {
            let Some(key_file) = serve.keys else {
                bail!("mcp --http needs --keys FILE: every request must carry a bearer key");
            };
            let keys = Keys::load(&key_file)?;
            let tools = MemoryTools::new(store, embedder, ScopeSource::Credential);
            serve_http(tools, keys, address, serve.allowed_hosts).await?;
        }
    }
    Ok(())
}

fn make_key(
    path: &Path,
    namespace: &str,
    subject: Option<&str>,
    admin: bool,
    label: Option<String>,
) -> Result<()> {
    let grant = match subject {
        Some(subject) if !admin => Grant::Scope(Scope::new(namespace, subject)?),
        _ => Grant::Admin,
    };
    let (key, entry) = keys::generate(&grant, label)?;
    let mut file = KeyFile::read(path)?;
    file.keys.push(entry);
    file.write(path)?;
    eprintln!(
        "added to {} ({}); the key is shown once:",
        path.display(),
        match &grant {
            Grant::Scope(scope) => format!("scope {scope}"),
            Grant::Admin => "admin".to_owned(),
        }
    );
    println!("{key}");
    Ok(())
}

/// Serves the tools over streamable HTTP at `/mcp`, every request authenticated.
pub async fn serve_http(
    tools: MemoryTools,
    keys: Keys,
    address: SocketAddr,
    allowed_hosts: Vec<String>,
) -> Result<()> {
    let mut hosts: Vec<String> = vec!["localhost".into(), "127.0.0.1".into(), "::1".into()];
    hosts.extend(allowed_hosts);
    let config = StreamableHttpServerConfig::default().with_allowed_hosts(hosts);
    let service = StreamableHttpService::new(
        move || Ok(tools.clone()),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let router = axum::Router::new()
        .nest_service("/mcp", service)
        .layer(middleware::from_fn_with_state(Arc::new(keys), authenticate));
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .with_context(|| format!("cannot listen on {address}"))?;
    eprintln!(
        "agent-memory MCP server on http://{}/mcp",
        listener.local_addr()?
    );
    axum::serve(listener, router)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}

/// Refuses a request without a valid bearer key; puts the key's scope on the others.
async fn authenticate(State(keys): State<Arc<Keys>>, mut request: Request, next: Next) -> Response {
    let headers = request.headers();
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "));
    let Some(grant) = presented.and_then(|key| keys.grant(key.trim())) else {
        return (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            "a valid bearer key is required",
        )
            .into_response();
    };
    let scope = match scope_of(grant, headers) {
        Ok(scope) => scope,
        Err((status, why)) => return (status, why).into_response(),
    };
    request.extensions_mut().insert(Tenant(scope));
    next.run(request).await
}

/// The scope a request works in: its key's, or for an admin key its headers'.
fn scope_of(grant: &Grant, headers: &HeaderMap) -> Result<Scope, (StatusCode, String)> {
    let header = |name: &str| {
        headers
            .get(name)
            .map(|value| value.to_str().map(str::to_owned))
            .transpose()
            .map_err(|_| (StatusCode::BAD_REQUEST, format!("{name} is not text")))
    };
    let (namespace, subject) = (header(NAMESPACE_HEADER)?, header(SUBJECT_HEADER)?);
    match grant {
        Grant::Scope(scope) => {
            let differs = namespace.is_some_and(|n| n != scope.namespace().as_str())
                || subject.is_some_and(|s| scope.subject().is_none_or(|own| own.as_str() != s));
            if differs {
                return Err((
                    StatusCode::FORBIDDEN,
                    "this key is bound to another scope than the request's headers name".into(),
                ));
            }
            Ok(scope.clone())
        }
        Grant::Admin => match (namespace, subject) {
            (Some(namespace), Some(subject)) => {
                Scope::new(namespace, subject).map_err(|e| (StatusCode::BAD_REQUEST, e.to_string()))
            }
            _ => Err((
                StatusCode::BAD_REQUEST,
                format!("an admin key needs the {NAMESPACE_HEADER} and {SUBJECT_HEADER} headers"),
            )),
        },
    }
}
