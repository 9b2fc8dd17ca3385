//! The HTTP server's sessions, each bound to the scope of the key that opened it.
//!
//! rmcp's session manager routes a request by its `Mcp-Session-Id` alone: any caller who knows
//! an id may post on, stream from or delete that session, and a response goes to whoever waits
//! on the same session and JSON-RPC id. So the bearer key would not protect a tenant; the
//! secrecy of an id would. This table stands in front of it. It knows every session the server
//! opened, which key opened it and in which scope; a request naming a session it does not hold
//! for the caller's scope is answered exactly as one naming a session that never existed.
//!
//! It also bounds what a key can hold open in one scope (so one tenant behind a shared admin key
//! cannot take every other tenant's room) and what the server holds in all, and ends sessions
//! left idle, closing
//! them in rmcp's manager so their memory comes back. (rmcp's own idle time-out stops a session's
//! worker but keeps its entry, so it is turned off and this table expires sessions instead.)

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt as _;
use mnemix_core::Scope;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::session::SessionManager as _;

use super::keys::KeyId;

/// How many sessions a key may hold open, how many the server holds, and how long one may sit
/// unused.
#[derive(Debug, Clone, Copy)]
pub struct SessionLimits {
    /// Open sessions per key in one scope (a scoped key's one; each scope an admin key names);
    /// an `initialize` beyond it is refused with 429.
    pub per_key: usize,
    /// Open sessions of every key together; an `initialize` beyond it is refused with 429.
    pub total: usize,
    /// A session with no request or stream in flight for this long is ended.
    pub idle: Duration,
}

impl Default for SessionLimits {
    fn default() -> Self {
        Self {
            per_key: 64,
            total: 1024,
            idle: Duration::from_mins(30),
        }
    }
}

/// Who is calling: the key's identity and the scope the request works in.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The digest of the bearer key.
    pub key: KeyId,
    /// The key's scope, or for an admin key the scope its headers name.
    pub scope: Scope,
}

/// Every open session of the server, by id.
pub struct Sessions {
    manager: Arc<LocalSessionManager>,
    limits: SessionLimits,
    table: Mutex<Table>,
    /// When sessions were last closed: their workers end, and free what they held, on their
    /// own schedule afterwards, so the sweeps that follow give freed memory back again.
    last_closed: Mutex<Option<Instant>>,
}

/// How long after closing sessions the sweeps keep giving freed memory back: a closed
/// session's worker may end seconds later on a loaded machine.
const SETTLE: Duration = Duration::from_secs(30);

#[derive(Default)]
struct Table {
    open: HashMap<String, Session>,
    /// `initialize` requests under way, by key and scope: they count against the caps until
    /// answered.
    opening: HashMap<(KeyId, Scope), usize>,
}

struct Session {
    key: KeyId,
    scope: Scope,
    last_used: Instant,
    /// Requests and streams of this session not yet finished: it is not idle while any is.
    in_flight: usize,
    /// Of those, the calls (POSTs): a call under way is answered even when its key is revoked.
    calls: usize,
    /// Its key was revoked: it takes no new request and is ended once its calls are answered.
    revoked: bool,
}

impl Table {
    /// The sessions `caller`'s key holds in its scope, open or opening.
    fn held_by(&self, caller: &Caller) -> usize {
        let opening = self.opening.get(&(caller.key, caller.scope.clone()));
        self.open
            .values()
            .filter(|s| s.key == caller.key && s.scope == caller.scope)
            .count()
            + opening.copied().unwrap_or(0)
    }

    /// Every session, open or opening.
    fn held(&self) -> usize {
        self.open.len() + self.opening.values().sum::<usize>()
    }
}

impl Sessions {
    /// A table in front of `manager`, whose own idle time-out it turns off.
    pub fn new(limits: SessionLimits) -> Arc<Self> {
        let mut manager = LocalSessionManager::default();
        manager.session_config.keep_alive = None;
        Arc::new(Self {
            manager: Arc::new(manager),
            limits,
            table: Mutex::new(Table::default()),
            last_closed: Mutex::new(None),
        })
    }

    /// The session manager rmcp's service runs on.
    pub fn manager(&self) -> Arc<LocalSessionManager> {
        Arc::clone(&self.manager)
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        // A panic while holding the lock leaves the table consistent (every change is one
        // insert or remove), so a poisoned lock is still usable.
        self.table
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Room for one more session of `caller`'s key in its scope, or `None` at either cap.
    pub fn reserve(self: &Arc<Self>, caller: &Caller) -> Option<Reservation> {
        let mut table = self.table();
        if table.held_by(caller) >= self.limits.per_key || table.held() >= self.limits.total {
            return None;
        }
        *table
            .opening
            .entry((caller.key, caller.scope.clone()))
            .or_default() += 1;
        Some(Reservation {
            sessions: Arc::clone(self),
            caller: caller.clone(),
        })
    }

    /// Enters session `id` for `caller` with a call (a POST, `call`) or a stream: `None`
    /// unless the session is open, bound to the caller's scope and its key not revoked. The
    /// lease keeps the session from expiring until it is dropped.
    pub fn enter(self: &Arc<Self>, id: &str, caller: &Caller, call: bool) -> Option<Lease> {
        let mut table = self.table();
        let session = table.open.get_mut(id)?;
        if session.scope != caller.scope || session.revoked {
            return None;
        }
        session.in_flight += 1;
        session.calls += usize::from(call);
        session.last_used = Instant::now();
        Some(Lease {
            sessions: Arc::clone(self),
            id: id.to_owned(),
            call,
        })
    }

    /// Forgets session `id` (the client ended it).
    pub fn ended(&self, id: &str) {
        self.table().open.remove(id);
    }

    /// Ends every session idle for longer than the limit; how many.
    pub async fn expire_idle(&self) -> usize {
        let idle = self.limits.idle;
        self.close_where(|session| session.in_flight == 0 && session.last_used.elapsed() >= idle)
            .await
    }

    /// Ends every session whose key no longer grants its scope (a revoked or changed key); how
    /// many. A session with a call under way takes no new request and ends once that call is
    /// answered: a call is applied and answered, or refused, never applied unanswered.
    pub async fn close_ungranted(&self, still_grants: impl Fn(&KeyId, &Scope) -> bool) -> usize {
        let mut answering = 0;
        {
            let mut table = self.table();
            for session in table.open.values_mut() {
                if session.calls > 0 && !still_grants(&session.key, &session.scope) {
                    session.revoked = true;
                    answering += 1;
                }
            }
        }
        answering
            + self
                .close_where(|session| {
                    session.calls == 0 && !still_grants(&session.key, &session.scope)
                })
                .await
    }

    async fn close_where(&self, condition: impl Fn(&Session) -> bool) -> usize {
        let ended: Vec<String> = {
            let mut table = self.table();
            let ids: Vec<String> = table
                .open
                .iter()
                .filter(|(_, session)| condition(session))
                .map(|(id, _)| id.clone())
                .collect();
            for id in &ids {
                table.open.remove(id);
            }
            ids
        };
        for id in &ended {
            // Gone from the table first, so no request reaches it while it closes.
            let _ = self.manager.close_session(&id.as_str().into()).await;
        }
        if !ended.is_empty() {
            give_back_freed_memory();
            *self.last_closed() = Some(Instant::now());
        }
        ended.len()
    }

    fn last_closed(&self) -> MutexGuard<'_, Option<Instant>> {
        self.last_closed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Ends idle sessions every so often, for as long as the server runs, and gives back the
    /// memory of sessions closed lately whose workers have ended since.
    pub async fn expire_forever(self: Arc<Self>) {
        let period =
            (self.limits.idle / 4).clamp(Duration::from_millis(100), Duration::from_secs(30));
        loop {
            tokio::time::sleep(period).await;
            if self.expire_idle().await == 0 {
                let settling = self.last_closed().is_some_and(|at| at.elapsed() <= SETTLE);
                if settling {
                    give_back_freed_memory();
                }
            }
        }
    }
}

/// A session being opened; dropped unopened, it frees its place under the cap.
pub struct Reservation {
    sessions: Arc<Sessions>,
    caller: Caller,
}

impl Reservation {
    /// The server opened session `id` for the reserving caller.
    pub fn opened(self, id: &str) {
        self.sessions.table().open.insert(
            id.to_owned(),
            Session {
                key: self.caller.key,
                scope: self.caller.scope.clone(),
                last_used: Instant::now(),
                in_flight: 0,
                calls: 0,
                revoked: false,
            },
        );
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut table = self.sessions.table();
        let opening = (self.caller.key, self.caller.scope.clone());
        if let Some(count) = table.opening.get_mut(&opening) {
            *count -= 1;
            if *count == 0 {
                table.opening.remove(&opening);
            }
        }
    }
}

/// A request or stream in flight on a session.
pub struct Lease {
    sessions: Arc<Sessions>,
    id: String,
    call: bool,
}

impl Lease {
    /// Holds the lease until `response`'s body is finished or dropped (a stream stays in use
    /// for as long as the client reads it).
    pub fn hold_until_sent(self, response: Response) -> Response {
        let (parts, body) = response.into_parts();
        let body = body.map_frame(move |frame| {
            let _held = &self;
            frame
        });
        Response::from_parts(parts, Body::new(body))
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let mut table = self.sessions.table();
        let Some(session) = table.open.get_mut(&self.id) else {
            return;
        };
        session.in_flight -= 1;
        session.calls -= usize::from(self.call);
        session.last_used = Instant::now();
        if session.revoked && session.calls == 0 {
            // The last call of a revoked key's session is answered: end the session now.
            table.open.remove(&self.id);
            drop(table);
            let (manager, id) = (self.sessions.manager(), self.id.clone());
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(async move {
                    let _ = manager.close_session(&id.as_str().into()).await;
                });
            }
        }
    }
}

/// The answer to a session this server does not hold for the caller: rmcp's own answer to an
/// unknown session, word for word, so a foreign session's id cannot be confirmed.
pub fn unknown_session() -> Response {
    (StatusCode::NOT_FOUND, "Not Found: Session not found").into_response()
}

/// Returns the heap's free pages to the operating system. A session holds tens of kilobytes in
/// rmcp's channels and caches, and glibc keeps what ended sessions freed: without this the
/// memory of thousands of ended sessions never came back.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn give_back_freed_memory() {
    // SAFETY: malloc_trim takes no pointer and is thread-safe; it only releases free memory.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn give_back_freed_memory() {}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(key: u8, subject: &str) -> Caller {
        Caller {
            key: [key; 32],
            scope: Scope::new("acme", subject).unwrap(),
        }
    }

    fn limits(per_key: usize, total: usize) -> SessionLimits {
        SessionLimits {
            per_key,
            total,
            ..SessionLimits::default()
        }
    }

    #[test]
    fn a_shared_admin_key_holds_its_cap_in_each_scope_it_names() {
        let sessions = Sessions::new(limits(2, 100));
        let (ada, bob) = (caller(1, "ada"), caller(1, "bob"));
        for id in ["a1", "a2"] {
            sessions.reserve(&ada).expect("within ada's cap").opened(id);
        }
        assert!(sessions.reserve(&ada).is_none(), "ada's scope is full");
        let reserved = sessions.reserve(&bob);
        assert!(
            reserved.is_some(),
            "bob, behind the same key, still has room"
        );
        drop(reserved);
        sessions.ended("a1");
        assert!(
            sessions.reserve(&ada).is_some(),
            "an ended session frees its place"
        );
    }

    #[tokio::test]
    async fn a_call_under_way_when_its_key_is_revoked_is_answered_then_the_session_ends() {
        let sessions = Sessions::new(limits(8, 8));
        let ada = caller(4, "ada");
        sessions.reserve(&ada).expect("room").opened("idle");
        sessions.reserve(&ada).expect("room").opened("busy");
        let call = sessions.enter("busy", &ada, true).expect("open");
        let stream = sessions.enter("idle", &ada, false).expect("open");
        assert_eq!(sessions.close_ungranted(|_, _| false).await, 2);
        // The session holding only a stream ended at once; the one with a call waits for it.
        assert!(!sessions.table().open.contains_key("idle"));
        assert!(sessions.table().open.contains_key("busy"));
        assert!(
            sessions.enter("busy", &ada, true).is_none(),
            "a revoked key's session takes no new call"
        );
        drop(stream);
        drop(call);
        assert!(
            !sessions.table().open.contains_key("busy"),
            "answered, the session ends"
        );
    }

    #[test]
    fn the_server_holds_at_most_its_total_of_sessions() {
        let sessions = Sessions::new(limits(64, 3));
        let held: Vec<Reservation> = ["ada", "bob", "cy"]
            .iter()
            .map(|subject| sessions.reserve(&caller(2, subject)).expect("room"))
            .collect();
        assert!(
            sessions.reserve(&caller(3, "dee")).is_none(),
            "opening sessions count against the total too"
        );
        drop(held);
        assert!(sessions.reserve(&caller(3, "dee")).is_some());
    }
}
