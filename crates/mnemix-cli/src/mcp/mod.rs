//! `mnemix mcp`: the memory as an MCP server, over stdio or streamable HTTP.
//!
//! Over HTTP every request passes one gate before rmcp's service sees it: the bearer key is
//! checked (and its scope put on the request as a [`Tenant`]), a session named by the request
//! must be one this key's scope opened ([`sessions`]), and a key holds at most so many sessions.
//! The keys are re-read while serving, so `mcp key revoke` takes effect within a second.

pub(crate) mod connections;
mod embedding;
pub(crate) mod keys;
mod sessions;
mod tools;

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context as _, Result};
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use clap::{Args, Subcommand};
use connections::ConnectionLimits;
use http_body_util::{BodyExt as _, LengthLimitError, Limited};
use mnemix_core::embed::Embedder;
use mnemix_core::{Scope, Ttl};
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::ServiceExt as _;

pub use keys::{Grant, KeyFile, KeyId, KeyRing, Keys};
pub use sessions::{Caller, SessionLimits, Sessions};
pub use tools::{MemoryTools, ScopeSource, Tenant};

/// The header an admin key names the namespace with.
pub const NAMESPACE_HEADER: &str = "x-memory-namespace";
/// The header an admin key names the subject with.
pub const SUBJECT_HEADER: &str = "x-memory-subject";
/// The header a streamable HTTP session is named by.
const SESSION_HEADER: &str = "mcp-session-id";
/// The largest request body the server reads (rmcp's own default).
const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;
/// The largest `initialize` request: what it says is kept as long as its session, so it is held
/// to far less than a tool call.
const MAX_INITIALIZE_BYTES: usize = 64 * 1024;
/// How long a request's body may take to arrive once its headers have.
const BODY_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// `mnemix mcp …`
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
    /// Manage the HTTP server's bearer keys: `mcp key --keys FILE --subject S` makes one (as
    /// `mcp key add`), `mcp key list` and `mcp key revoke` the others. A running server picks
    /// up every change within a second, or at once on SIGHUP.
    Key(KeyArgs),
}

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
struct KeyArgs {
    #[command(subcommand)]
    action: Option<KeyAction>,
    #[command(flatten)]
    add: AddKey,
}

#[derive(Debug, Subcommand)]
enum KeyAction {
    /// Make a key: prints it once, stores only its SHA-256.
    Add(AddKey),
    /// The keys of a key file: id, label, scope and date, never the key.
    List {
        /// The key file the server reads (`--keys` of `mcp --http`).
        #[arg(long)]
        keys: PathBuf,
    },
    /// Remove a key (by the id `list` shows) or every key of a label; a running server refuses
    /// it within a second and ends its sessions.
    Revoke {
        /// The key file the server reads.
        #[arg(long)]
        keys: PathBuf,
        /// The key's id, as `mcp key list` shows it.
        #[arg(required_unless_present = "label")]
        id: Option<String>,
        /// Every key with this label instead.
        #[arg(long, conflicts_with = "id")]
        label: Option<String>,
    },
}

#[derive(Debug, Args)]
struct AddKey {
    /// The key file the server reads (`--keys` of `mcp --http`).
    #[arg(long)]
    keys: Option<PathBuf>,
    /// The subject the key is bound to (its namespace is `--namespace`).
    #[arg(long)]
    subject: Option<String>,
    /// An admin key instead: any scope, named by the X-Memory-Namespace and
    /// X-Memory-Subject headers of each request.
    #[arg(long, conflicts_with = "subject")]
    admin: bool,
    /// Who holds it, for people reading the key file (and for `revoke --label`).
    #[arg(long)]
    label: Option<String>,
}

#[derive(Debug, Args)]
struct ServeArgs {
    /// Serve streamable HTTP on this address (e.g. 127.0.0.1:8731 or localhost:8731) instead
    /// of stdio. Keys travel in clear over plain HTTP: off the loopback, put a TLS proxy in front.
    #[arg(long, value_name = "ADDR")]
    http: Option<String>,
    /// Over HTTP: the key file (make keys with `mnemix mcp key`).
    #[arg(long, requires = "http")]
    keys: Option<PathBuf>,
    /// Over HTTP: a Host header to accept besides localhost (repeat for several); needed when
    /// clients reach the server by another name.
    #[arg(long = "allowed-host", requires = "http")]
    allowed_hosts: Vec<String>,
    /// Over HTTP: how many sessions one key may hold open in one scope (each scope an admin
    /// key names counts apart); one more `initialize` gets 429.
    #[arg(long, requires = "http", default_value_t = SessionLimits::default().per_key)]
    max_sessions_per_key: usize,
    /// Over HTTP: how many sessions the server holds open in all; one more `initialize` gets
    /// 429.
    #[arg(long, requires = "http", default_value_t = SessionLimits::default().total)]
    max_sessions: usize,
    /// Over HTTP: a session with no request or stream for this long is ended ("30s", "15m",
    /// "1h"); its client must initialize again.
    #[arg(long, requires = "http", default_value = "30m")]
    session_idle: Ttl,
    /// Over stdio: whose memory this server serves (its namespace is `--namespace`).
    #[arg(long, conflicts_with = "http")]
    subject: Option<String>,
}

/// Runs `mnemix mcp`.
pub async fn run(url: &str, namespace: &str, args: McpArgs) -> Result<()> {
    if let Some(McpCommand::Key(key)) = args.command {
        return manage_keys(namespace, key);
    }
    let store = mnemix::open(url)
        .await
        .with_context(|| format!("cannot open {}", mnemix::redacted(url)))?;
    // The offline embedder, as `mnemix search` and the demo use: semantic search over
    // what this server remembered works with no model and no network. Off the runtime's
    // threads, so one tenant's long text delays no other's call.
    let embedder: Arc<dyn Embedder> = Arc::new(embedding::OffRuntime::hashing());
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
            if serve.max_sessions_per_key == 0 || serve.max_sessions == 0 {
                bail!("--max-sessions-per-key 0 or --max-sessions 0 would refuse every client");
            }
            let keys = KeyRing::load(&key_file)?;
            let tools = MemoryTools::new(store, embedder, ScopeSource::Credential);
            let limits = SessionLimits {
                per_key: serve.max_sessions_per_key,
                total: serve.max_sessions,
                idle: serve.session_idle.duration(),
            };
            serve_http(tools, keys, &address, serve.allowed_hosts, limits).await?;
        }
    }
    Ok(())
}

fn manage_keys(namespace: &str, args: KeyArgs) -> Result<()> {
    match args.action.unwrap_or(KeyAction::Add(args.add)) {
        KeyAction::Add(add) => {
            let Some(path) = add.keys else {
                bail!("mcp key needs --keys FILE: the key file the server reads");
            };
            let grant = match (add.subject, add.admin) {
                (Some(subject), false) => Grant::Scope(Scope::new(namespace, subject)?),
                (None, true) => Grant::Admin,
                _ => bail!("mcp key needs --subject (a key for one scope) or --admin"),
            };
            let key = keys::add(&path, &grant, add.label)?;
            eprintln!(
                "added to {} ({}); the key is shown once:",
                path.display(),
                match &grant {
                    Grant::Scope(scope) => format!("scope {scope}"),
                    Grant::Admin => "admin".to_owned(),
                }
            );
            println!("{key}");
        }
        KeyAction::List { keys } => {
            let file = KeyFile::read(&keys)?;
            if file.keys.is_empty() {
                println!("{} holds no keys", keys.display());
            }
            for entry in &file.keys {
                println!(
                    "{}  {:<30}  {:<16}  {}",
                    entry.short_id(),
                    entry.grants(),
                    entry
                        .created_at
                        .map_or_else(|| "-".to_owned(), crate::ui::utc_minute),
                    entry.label.as_deref().unwrap_or("-"),
                );
            }
        }
        KeyAction::Revoke { keys, id, label } => {
            let removed = keys::revoke(&keys, id.as_deref(), label.as_deref())?;
            for entry in &removed {
                println!(
                    "revoked {} ({}, label {})",
                    entry.short_id(),
                    entry.grants(),
                    entry.label.as_deref().unwrap_or("-")
                );
            }
        }
    }
    Ok(())
}

/// What every HTTP request passes before rmcp's service: the keys and the session table.
struct Gate {
    keys: KeyRing,
    sessions: Arc<Sessions>,
}

/// Serves the tools over streamable HTTP at `/mcp`, every request authenticated and every
/// session bound to its opener's scope. Runs until Ctrl-C.
pub async fn serve_http(
    tools: MemoryTools,
    keys: KeyRing,
    address: &str,
    allowed_hosts: Vec<String>,
    limits: SessionLimits,
) -> Result<()> {
    let mut hosts: Vec<String> = vec!["localhost".into(), "127.0.0.1".into(), "::1".into()];
    hosts.extend(allowed_hosts);
    let config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(hosts)
        .with_max_request_body_bytes(MAX_BODY_BYTES);
    let sessions = Sessions::new(limits);
    let service = StreamableHttpService::new(move || Ok(tools.clone()), sessions.manager(), config);
    let gate = Arc::new(Gate { keys, sessions });
    let router = axum::Router::new()
        .nest_service("/mcp", service)
        .layer(middleware::from_fn_with_state(Arc::clone(&gate), admit));
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .with_context(|| format!("cannot listen on {address}"))?;
    let bound = listener.local_addr()?;
    eprintln!("mnemix MCP server on http://{bound}/mcp");
    if !bound.ip().is_loopback() {
        eprintln!(
            "warning: plain HTTP on {bound}: bearer keys travel in clear unless a TLS proxy is in front"
        );
    }
    let expiry = tokio::spawn(Arc::clone(&gate.sessions).expire_forever());
    let watch = tokio::spawn(watch_keys(Arc::clone(&gate)));
    connections::serve(listener, router, ConnectionLimits::default(), async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await;
    expiry.abort();
    watch.abort();
    Ok(())
}

/// Re-reads the key file when it changes (looked at every second) and on SIGHUP; ends the
/// sessions no key grants any more.
async fn watch_keys(gate: Arc<Gate>) {
    #[cfg(unix)]
    let mut hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
    loop {
        #[cfg(unix)]
        let forced = tokio::select! {
            () = tokio::time::sleep(keys::KEY_FILE_POLL) => false,
            Some(()) = async {
                match hangup.as_mut() {
                    Some(signal) => signal.recv().await,
                    None => std::future::pending().await,
                }
            } => true,
        };
        #[cfg(not(unix))]
        let forced = {
            tokio::time::sleep(keys::KEY_FILE_POLL).await;
            false
        };
        if let Some(keys) = gate.keys.reload(forced) {
            let closed = gate
                .sessions
                .close_ungranted(|key, scope| keys.grants(key, scope))
                .await;
            eprintln!(
                "mnemix mcp: keys re-read: {} in force; {closed} sessions of revoked keys end (at once, or once their calls under way are answered)",
                keys.len()
            );
        }
    }
}

/// The gate: authentication, the JSON-RPC shape of a POST, and session ownership.
async fn admit(State(gate): State<Arc<Gate>>, request: Request, next: Next) -> Response {
    let keys = gate.keys.current();
    let caller = match authenticate(&keys, request.headers()) {
        Ok(caller) => caller,
        Err(refusal) => return refusal.into_response(),
    };
    let (mut parts, body) = request.into_parts();
    parts
        .extensions
        .insert(Tenant(caller.scope.clone(), keys.principal(&caller.key)));
    let mut initialize = false;
    let body = if parts.method == Method::POST {
        let bytes = match read_body(body).await {
            Ok(bytes) => bytes,
            Err(refusal) => return refusal.into_response(),
        };
        match peek_method(&bytes) {
            Ok(method) => initialize = method.as_deref() == Some("initialize"),
            Err(refusal) => return refusal.into_response(),
        }
        if initialize && bytes.len() > MAX_INITIALIZE_BYTES {
            // rmcp keeps what an initialize says (the client's info and capabilities) for the
            // session's life.
            return Refusal::Status(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "Payload Too Large: an initialize request exceeds {MAX_INITIALIZE_BYTES} bytes"
                ),
            )
            .into_response();
        }
        Body::from(bytes)
    } else {
        body
    };
    let json_typed = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.trim_start()
                .to_ascii_lowercase()
                .starts_with("application/json")
        });
    let session = parts
        .headers
        .get(SESSION_HEADER)
        .map(|v| v.to_str().unwrap_or_default().to_owned());
    let deleting = parts.method == Method::DELETE;
    let calling = parts.method == Method::POST;
    let request = Request::from_parts(parts, body);

    let Some(session) = session else {
        // No session yet: an initialize opens one, within the key's cap.
        let reservation = if initialize {
            match gate.sessions.reserve(&caller) {
                Some(reservation) => Some(reservation),
                None => return too_many_sessions(),
            }
        } else {
            None
        };
        let response = as_clients_expect(next.run(request).await, json_typed);
        let opened = response
            .headers()
            .get(SESSION_HEADER)
            .and_then(|v| v.to_str().ok());
        if let (Some(reservation), Some(id), true) =
            (reservation, opened, response.status().is_success())
        {
            reservation.opened(id);
        }
        return response;
    };
    let Some(lease) = gate.sessions.enter(&session, &caller, calling) else {
        return sessions::unknown_session();
    };
    let response = as_clients_expect(next.run(request).await, json_typed);
    if deleting && response.status() == StatusCode::ACCEPTED {
        // rmcp ends a session with 202, which the 2.x SDK logs as a failed termination on
        // every close; 204 is what clients accept.
        gate.sessions.ended(&session);
        return StatusCode::NO_CONTENT.into_response();
    }
    lease.hold_until_sent(response)
}

/// Why the gate refused a request.
enum Refusal {
    /// No valid bearer key.
    Unauthorized,
    /// A plain-text refusal.
    Status(StatusCode, String),
    /// A body that is no single JSON-RPC message: 400 with a JSON-RPC error.
    JsonRpc(i64, String),
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        match self {
            // Refused before its body was read: the connection is closed after the answer
            // (the unread body would be taken for the next request), and says so.
            Self::Unauthorized => (
                StatusCode::UNAUTHORIZED,
                [
                    (header::WWW_AUTHENTICATE, "Bearer"),
                    (header::CONNECTION, "close"),
                ],
                "a valid bearer key is required",
            )
                .into_response(),
            Self::Status(status, why) => (status, why).into_response(),
            Self::JsonRpc(code, message) => {
                let error = serde_json::json!({"jsonrpc": "2.0", "id": null,
                    "error": {"code": code, "message": message}});
                (
                    StatusCode::BAD_REQUEST,
                    [(
                        header::CONTENT_TYPE,
                        HeaderValue::from_static("application/json"),
                    )],
                    error.to_string(),
                )
                    .into_response()
            }
        }
    }
}

/// The caller of a request with a valid bearer key (the scheme's case does not matter).
fn authenticate(keys: &Keys, headers: &HeaderMap) -> Result<Caller, Refusal> {
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, key)| key.trim());
    let Some((key, grant)) = presented.and_then(|key| keys.grant(key)) else {
        return Err(Refusal::Unauthorized);
    };
    let scope = scope_of(grant, headers).map_err(|(status, why)| Refusal::Status(status, why))?;
    Ok(Caller { key, scope })
}

/// A POST's body, up to the size rmcp reads.
async fn read_body(body: Body) -> Result<Bytes, Refusal> {
    let read = tokio::time::timeout(
        BODY_READ_TIMEOUT,
        Limited::new(body, MAX_BODY_BYTES).collect(),
    );
    let Ok(read) = read.await else {
        return Err(Refusal::Status(
            StatusCode::REQUEST_TIMEOUT,
            format!(
                "the request body did not arrive within {} s",
                BODY_READ_TIMEOUT.as_secs()
            ),
        ));
    };
    match read {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(error) if error.downcast_ref::<LengthLimitError>().is_some() => Err(Refusal::Status(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("Payload Too Large: request body exceeds {MAX_BODY_BYTES} bytes"),
        )),
        Err(error) => Err(Refusal::Status(
            StatusCode::BAD_REQUEST,
            format!("cannot read the request body: {error}"),
        )),
    }
}

/// The JSON-RPC method of a POST's body; a batch or a body that is not JSON is refused with 400
/// and a JSON-RPC error, as the MCP specification asks.
fn peek_method(body: &[u8]) -> Result<Option<String>, Refusal> {
    #[derive(serde::Deserialize)]
    struct Peek {
        method: Option<String>,
    }
    if body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[') {
        return Err(Refusal::JsonRpc(
            -32600,
            "JSON-RPC batches are not supported: send one message per request".to_owned(),
        ));
    }
    serde_json::from_slice::<Peek>(body)
        .map(|peek| peek.method)
        .map_err(|e| Refusal::JsonRpc(-32700, format!("the body is not a JSON-RPC message: {e}")))
}

/// rmcp answers 415 to a JSON body that is no JSON-RPC message; for a body sent as JSON that is
/// a bad request (400), not a wrong media type.
fn as_clients_expect(mut response: Response, json_typed: bool) -> Response {
    if json_typed && response.status() == StatusCode::UNSUPPORTED_MEDIA_TYPE {
        *response.status_mut() = StatusCode::BAD_REQUEST;
    }
    response
}

fn too_many_sessions() -> Response {
    (
        StatusCode::TOO_MANY_REQUESTS,
        "no room for another session: this key holds as many in this scope as the server \
         allows (--max-sessions-per-key), or the server holds as many as it allows in all \
         (--max-sessions): end one with DELETE, or wait for an idle one to expire \
         (--session-idle)",
    )
        .into_response()
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

#[cfg(test)]
mod tests {
    use tower::ServiceExt as _;

    use super::*;

    /// The gate in front of a route that answers 200, with one admin key; the key and the
    /// directory holding its file.
    fn gated() -> (axum::Router, String, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys.json");
        let key = keys::add(&path, &Grant::Admin, None).unwrap();
        let gate = Arc::new(Gate {
            keys: KeyRing::load(&path).unwrap(),
            sessions: Sessions::new(SessionLimits::default()),
        });
        let router = axum::Router::new()
            .route("/mcp", axum::routing::post(|| async { "ok" }))
            .layer(middleware::from_fn_with_state(gate, admit));
        (router, key, dir)
    }

    fn initialize(key: &str, client_info_bytes: usize) -> Request {
        let body = serde_json::json!({
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"clientInfo": {"name": "x".repeat(client_info_bytes), "version": "1"}},
        });
        Request::post("/mcp")
            .header(header::AUTHORIZATION, format!("Bearer {key}"))
            .header(header::CONTENT_TYPE, "application/json")
            .header(NAMESPACE_HEADER, "acme")
            .header(SUBJECT_HEADER, "ada")
            .body(Body::from(body.to_string()))
            .unwrap()
    }

    #[tokio::test]
    async fn an_initialize_is_held_to_what_a_session_may_keep() {
        let (router, key, _dir) = gated();
        let small = router.clone().oneshot(initialize(&key, 100)).await.unwrap();
        assert_eq!(small.status(), StatusCode::OK);
        let large = router
            .oneshot(initialize(&key, MAX_INITIALIZE_BYTES))
            .await
            .unwrap();
        assert_eq!(large.status(), StatusCode::PAYLOAD_TOO_LARGE);
    }

    #[test]
    fn a_refused_key_closes_its_connection_and_says_so() {
        let response = Refusal::Unauthorized.into_response();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(
            response.headers().get(header::CONNECTION),
            Some(&HeaderValue::from_static("close")),
            "the unread body would be taken for the next request"
        );
    }
}
