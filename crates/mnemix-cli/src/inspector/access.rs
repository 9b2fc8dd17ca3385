//! Who may see what: logging in with a key, the session cookie, and the guard every request
//! passes (Host allow-list, same-origin and CSRF checks on writes, security headers).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::body::{to_bytes, Body};
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use axum::{Extension, Form};
use mnemix_core::{Namespace, Scope};
use serde::Deserialize;

use super::{view, Inspector};
use crate::mcp::{Grant, KeyId, KeyRing, Keys};
use mnemix_core::Principal;

/// The session cookie's name.
pub const COOKIE: &str = "mnemix_ui";
/// The form field every POST carries its session's CSRF token in.
pub const CSRF_FIELD: &str = "csrf";
/// How long a session lives however much it is used.
const SESSION_LIFETIME: Duration = Duration::from_hours(12);
/// How many sessions the server holds; a login past it ends the least recently used.
const MAX_SESSIONS: usize = 4096;
/// The largest form a POST may send (a working-memory document is the largest).
const MAX_FORM_BYTES: usize = 1024 * 1024;

/// How visitors are let in.
pub enum Access {
    /// No key file: anyone who reaches the (loopback) port sees every namespace.
    Open,
    /// Visitors log in with a key of this ring.
    Keys(Box<KeyRing>),
}

/// Who is asking, as the guard found them: on every request past the login page.
#[derive(Debug, Clone)]
pub struct Viewer {
    /// What their key grants now.
    pub grant: Grant,
    /// Their session's CSRF token, which every form carries back.
    pub csrf: String,
    /// Whether they logged in (and may log out).
    pub logged_in: bool,
    /// Who their writes are by: their key (its id and label), or the command line that
    /// serves an inspector without keys.
    pub writer: Principal,
}

impl Viewer {
    /// Whether they may see `scope`: an admin key any, a scoped key its own.
    pub fn sees(&self, scope: &Scope) -> bool {
        match &self.grant {
            Grant::Admin => true,
            Grant::Scope(own) => own == scope,
        }
    }

    /// Whether they may see `namespace`'s pages (a scoped key: its own namespace, where it
    /// sees its own subject only).
    pub fn sees_namespace(&self, namespace: &Namespace) -> bool {
        match &self.grant {
            Grant::Admin => true,
            Grant::Scope(own) => own.namespace() == namespace,
        }
    }
}

struct Session {
    key: KeyId,
    csrf: String,
    opened: Instant,
    used: Instant,
}

/// The logged-in sessions, by the secret their cookie holds.
pub struct Sessions {
    open: Mutex<HashMap<String, Session>>,
    idle: Duration,
    /// The CSRF token of the open (no key file) inspector, the same for every visitor.
    open_csrf: String,
}

impl Sessions {
    pub fn new(idle: Duration) -> Self {
        Self {
            open: Mutex::new(HashMap::new()),
            idle,
            open_csrf: secret(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Session>> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn live(&self, session: &Session, now: Instant) -> bool {
        now.duration_since(session.used) < self.idle
            && now.duration_since(session.opened) < SESSION_LIFETIME
    }

    /// A new session of `key`; returns the cookie's secret.
    fn start(&self, key: KeyId) -> String {
        let now = Instant::now();
        let token = secret();
        let mut open = self.lock();
        open.retain(|_, session| self.live(session, now));
        if open.len() >= MAX_SESSIONS {
            if let Some(oldest) = open
                .iter()
                .min_by_key(|(_, session)| session.used)
                .map(|(token, _)| token.clone())
            {
                open.remove(&oldest);
            }
        }
        open.insert(
            token.clone(),
            Session {
                key,
                csrf: secret(),
                opened: now,
                used: now,
            },
        );
        token
    }

    /// The key and CSRF token of a live session, which counts as used now.
    fn find(&self, token: &str) -> Option<(KeyId, String)> {
        let now = Instant::now();
        let mut open = self.lock();
        let live = open.get(token).is_some_and(|s| self.live(s, now));
        if !live {
            open.remove(token);
            return None;
        }
        let session = open.get_mut(token)?;
        session.used = now;
        Some((session.key, session.csrf.clone()))
    }

    fn end(&self, token: &str) {
        self.lock().remove(token);
    }

    /// Ends the sessions that expired or whose key no longer exists.
    fn purge(&self, keys: &Keys) -> usize {
        let now = Instant::now();
        let mut open = self.lock();
        let before = open.len();
        open.retain(|_, s| self.live(s, now) && keys.grant_of(&s.key).is_some());
        before - open.len()
    }
}

/// 32 random bytes as hex: a session's secret or CSRF token.
fn secret() -> String {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).expect("the operating system gives random bytes");
    hex::encode(bytes)
}

/// Compares two secrets in time that does not depend on where they differ.
fn same_secret(given: &str, expected: &str) -> bool {
    given.len() == expected.len()
        && given
            .bytes()
            .zip(expected.bytes())
            .fold(0u8, |differ, (a, b)| differ | (a ^ b))
            == 0
}

/// The session secret of the request's cookie.
fn session_token(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(cookie::Cookie::split_parse)
        .filter_map(Result::ok)
        .find(|c| c.name() == COOKIE)
        .map(|c| c.value().to_owned())
}

/// The host name a request was sent to (its Host header without the port).
fn host_name(headers: &HeaderMap) -> Option<&str> {
    let host = headers.get(header::HOST)?.to_str().ok()?;
    if host.starts_with('[') {
        // An IPv6 literal: `[::1]:8732`.
        return host.split_inclusive(']').next();
    }
    Some(host.rsplit_once(':').map_or(host, |(name, _)| name))
}

/// Whether a state-changing request came from this server's own pages: a browser says where
/// a request came from in `Sec-Fetch-Site` and `Origin`; a client that says neither (curl, a
/// script) must still hold the session and its CSRF token.
fn same_origin(headers: &HeaderMap) -> bool {
    if let Some(site) = headers.get("sec-fetch-site") {
        if site.as_bytes() != b"same-origin" {
            return false;
        }
    }
    let Some(origin) = headers.get(header::ORIGIN) else {
        return true;
    };
    let (Ok(origin), Some(host)) = (
        origin.to_str(),
        headers.get(header::HOST).and_then(|h| h.to_str().ok()),
    ) else {
        return false;
    };
    origin == format!("http://{host}") || origin == format!("https://{host}")
}

/// Every request passes here first.
pub async fn guard(
    State(inspector): State<Arc<Inspector>>,
    request: Request,
    next: Next,
) -> Response {
    let mut response = admit(&inspector, request, next).await;
    secure(response.headers_mut());
    response
}

async fn admit(inspector: &Inspector, request: Request, next: Next) -> Response {
    let headers = request.headers();
    if !host_name(headers).is_some_and(|host| {
        inspector
            .hosts
            .iter()
            .any(|allowed| allowed.eq_ignore_ascii_case(host))
    }) {
        // DNS rebinding: a page of another site whose name now points here.
        return (
            StatusCode::MISDIRECTED_REQUEST,
            "this server does not answer to that Host",
        )
            .into_response();
    }
    let writes = request.method() == Method::POST;
    if writes && !same_origin(headers) {
        return view::refusal(
            StatusCode::FORBIDDEN,
            "refused: this form was not sent from this server's own pages",
        );
    }
    let path = request.uri().path();
    let public = path == "/login" || path.starts_with("/static/");
    let viewer = match &inspector.access {
        Access::Open => Some(Viewer {
            grant: Grant::Admin,
            csrf: inspector.sessions.open_csrf.clone(),
            logged_in: false,
            writer: Principal::command(),
        }),
        Access::Keys(ring) => session_token(headers)
            .and_then(|token| inspector.sessions.find(&token))
            .and_then(|(key, csrf)| {
                // The key as it is now: a revoked key's session ends here.
                let keys = ring.current();
                let grant = keys.grant_of(&key)?.clone();
                Some(Viewer {
                    grant,
                    csrf,
                    logged_in: true,
                    writer: keys.principal(&key),
                })
            }),
    };
    let Some(viewer) = viewer else {
        if public {
            return next.run(request).await;
        }
        if writes {
            return view::refusal(StatusCode::FORBIDDEN, "refused: log in first");
        }
        return Redirect::to("/login").into_response();
    };
    let request = if writes && path != "/login" {
        match with_checked_token(request, &viewer.csrf).await {
            Ok(request) => request,
            Err(refusal) => return refusal,
        }
    } else {
        request
    };
    let mut request = request;
    request.extensions_mut().insert(viewer);
    next.run(request).await
}

/// The request with its body read back in, if its form carries the session's CSRF token.
async fn with_checked_token(request: Request, csrf: &str) -> Result<Request, Response> {
    let (parts, body) = request.into_parts();
    let Ok(bytes) = to_bytes(body, MAX_FORM_BYTES).await else {
        return Err(view::refusal(
            StatusCode::PAYLOAD_TOO_LARGE,
            "refused: the form is too large",
        ));
    };
    let fields: Vec<(String, String)> = serde_urlencoded::from_bytes(&bytes).unwrap_or_default();
    let carried = fields
        .iter()
        .any(|(name, value)| name == CSRF_FIELD && same_secret(value, csrf));
    if !carried {
        return Err(view::refusal(
            StatusCode::FORBIDDEN,
            "refused: the form's token is missing or stale (reload the page)",
        ));
    }
    Ok(Request::from_parts(parts, Body::from(bytes)))
}

/// What every response says about how it may be used: no script at all, no framing, no
/// caching, no sniffing, no referrer sent to another site.
fn secure(headers: &mut HeaderMap) {
    let set = |headers: &mut HeaderMap, name: &'static str, value: &'static str| {
        headers.insert(name, HeaderValue::from_static(value));
    };
    set(
        headers,
        "content-security-policy",
        "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; \
         frame-ancestors 'none'; base-uri 'none'",
    );
    set(headers, "x-content-type-options", "nosniff");
    set(headers, "x-frame-options", "DENY");
    // Not `no-referrer`: under it a browser sends `Origin: null` with the pages' own forms.
    set(headers, "referrer-policy", "same-origin");
    set(headers, "cross-origin-opener-policy", "same-origin");
    set(headers, "cross-origin-resource-policy", "same-origin");
    if !headers.contains_key(header::CACHE_CONTROL) {
        set(headers, "cache-control", "no-store");
    }
}

/// `GET /login`.
pub async fn login_page(
    State(inspector): State<Arc<Inspector>>,
    viewer: Option<Extension<Viewer>>,
) -> Response {
    if viewer.is_some() || matches!(inspector.access, Access::Open) {
        return Redirect::to("/").into_response();
    }
    view::login(None).into_response()
}

/// The login form.
#[derive(Deserialize)]
pub struct LoginForm {
    key: String,
}

/// `POST /login`: a key for a session cookie.
pub async fn login(
    State(inspector): State<Arc<Inspector>>,
    Form(form): Form<LoginForm>,
) -> Response {
    let Access::Keys(ring) = &inspector.access else {
        return Redirect::to("/").into_response();
    };
    let Some((key, _)) = ring
        .current()
        .grant(form.key.trim())
        .map(|(id, g)| (id, g.clone()))
    else {
        return (
            StatusCode::UNAUTHORIZED,
            view::login(Some("That key is not accepted.")),
        )
            .into_response();
    };
    let token = inspector.sessions.start(key);
    redirect_setting_cookie("/", &session_cookie(token).build())
}

/// The session cookie's attributes, in one place: no script reads it, no other site sends it.
fn session_cookie(value: String) -> cookie::CookieBuilder<'static> {
    cookie::Cookie::build((COOKIE, value))
        .http_only(true)
        .same_site(cookie::SameSite::Strict)
        .path("/")
}

/// A redirect to `to` that sets `cookie`.
fn redirect_setting_cookie(to: &str, cookie: &cookie::Cookie<'_>) -> Response {
    let mut response = Redirect::to(to).into_response();
    if let Ok(value) = HeaderValue::from_str(&cookie.to_string()) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

/// `POST /logout`: ends the session.
pub async fn logout(State(inspector): State<Arc<Inspector>>, request: Request) -> Response {
    if let Some(token) = session_token(request.headers()) {
        inspector.sessions.end(&token);
    }
    let cleared = session_cookie(String::new())
        .max_age(cookie::time::Duration::ZERO)
        .build();
    redirect_setting_cookie("/login", &cleared)
}

impl Inspector {
    /// Re-reads the key file if it changed (with `force`, whatever its stamp says), then ends
    /// the sessions of revoked keys and the expired ones.
    pub(super) fn reload_keys(&self, force: bool) {
        if let Access::Keys(ring) = &self.access {
            ring.reload(force);
            self.sessions.purge(&ring.current());
        }
    }
}

/// Looks at the key file every second: a revoked key's sessions end within seconds (and
/// already on their next request, which checks the key as it is now).
pub async fn watch_keys(inspector: Arc<Inspector>) {
    if matches!(inspector.access, Access::Open) {
        return;
    }
    loop {
        tokio::time::sleep(crate::mcp::keys::KEY_FILE_POLL).await;
        inspector.reload_keys(false);
    }
}
