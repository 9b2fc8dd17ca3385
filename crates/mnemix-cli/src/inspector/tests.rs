//! The inspector's routes called as its users and as an attacker would, without a browser: on
//! every backend the suite reaches (PostgreSQL and Redis are named skips unless required).

mod browser;

use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use axum::Router;
use mnemix_core::{
    AppendOptions, ConversationId, MemoryBackend, Message, NewConversation, Part, RememberOptions,
    Role, Scope, WorkingMemoryKey, WorkingMemoryUpdate,
};
use tower::ServiceExt as _;

use super::{default_memory_config, router, Inspector, Settings};
use crate::mcp::keys::{add, revoke};
use crate::mcp::{Grant, KeyRing};

const HOST: &str = "127.0.0.1:8732";
const ORIGIN: &str = "http://127.0.0.1:8732";

/// Facts an attacker planted through a tool result: each must render as text.
const PLANTED: [&str; 3] = [
    "<script>document.title='owned'</script>",
    "<img src=x onerror=\"document.title='owned'\">",
    "<a href=\"javascript:document.title='owned'\">click</a>",
];

/// A store with two subjects and an inspector over it.
struct World {
    inspector: Arc<Inspector>,
    router: Router,
    namespace: String,
    keys: std::path::PathBuf,
    admin: String,
    alice: String,
    bob: String,
    /// Alice's conversation (a tool call left unanswered in it).
    alice_thread: ConversationId,
    /// Alice's longer conversation, committed through the engine (so its messages are
    /// embedded for semantic recall).
    alice_trip: ConversationId,
    bob_thread: ConversationId,
    _dir: tempfile::TempDir,
}

struct Answer {
    status: StatusCode,
    headers: axum::http::HeaderMap,
    body: String,
}

impl World {
    async fn new(url: &str, writable: bool) -> Self {
        let store = mnemix::open(url).await.expect("open").backend();
        let mut suffix = [0u8; 6];
        getrandom::fill(&mut suffix).unwrap();
        let namespace = format!("ui{}", hex::encode(suffix));
        let alice_scope = Scope::new(namespace.clone(), "alice").unwrap();
        let bob_scope = Scope::new(namespace.clone(), "bob").unwrap();
        let alice_thread = seed(store.as_ref(), &alice_scope, "alice").await;
        let bob_thread = seed(store.as_ref(), &bob_scope, "bob").await;

        let dir = tempfile::tempdir().unwrap();
        let keys = dir.path().join("keys.json");
        let admin = add(&keys, &Grant::Admin, None).unwrap();
        let alice = add(
            &keys,
            &Grant::Scope(alice_scope.clone()),
            Some("alice".into()),
        )
        .unwrap();
        let bob = add(&keys, &Grant::Scope(bob_scope), Some("bob".into())).unwrap();
        let inspector = Arc::new(
            Inspector::new(
                store,
                Settings {
                    keys: Some(KeyRing::load(&keys).unwrap()),
                    writable,
                    ..Settings::new(default_memory_config())
                },
            )
            .unwrap(),
        );
        let alice_trip = trip(&inspector, &alice_scope).await;
        Self {
            router: router(Arc::clone(&inspector)),
            inspector,
            namespace,
            keys,
            admin,
            alice,
            bob,
            alice_thread,
            alice_trip,
            bob_thread,
            _dir: dir,
        }
    }

    async fn send(&self, request: Request<Body>) -> Answer {
        let response = self.router.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        Answer {
            status,
            headers,
            body: String::from_utf8_lossy(&bytes).into_owned(),
        }
    }

    async fn get(&self, path: &str, cookie: Option<&str>) -> Answer {
        let mut request = Request::get(path).header(header::HOST, HOST);
        if let Some(cookie) = cookie {
            request = request.header(header::COOKIE, cookie);
        }
        self.send(request.body(Body::empty()).unwrap()).await
    }

    async fn post(&self, path: &str, cookie: Option<&str>, form: &[(&str, &str)]) -> Answer {
        self.post_from(path, cookie, form, Some(ORIGIN)).await
    }

    async fn post_from(
        &self,
        path: &str,
        cookie: Option<&str>,
        form: &[(&str, &str)],
        origin: Option<&str>,
    ) -> Answer {
        let mut request = Request::post(path)
            .header(header::HOST, HOST)
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
        if let Some(origin) = origin {
            request = request.header(header::ORIGIN, origin);
        }
        if let Some(cookie) = cookie {
            request = request.header(header::COOKIE, cookie);
        }
        let body = serde_urlencoded::to_string(form).unwrap();
        self.send(request.body(Body::from(body)).unwrap()).await
    }

    /// Logs in; returns the `Cookie` header to send.
    async fn login(&self, key: &str) -> String {
        let answer = self.post("/login", None, &[("key", key)]).await;
        assert_eq!(answer.status, StatusCode::SEE_OTHER, "{}", answer.body);
        let set = answer.headers[header::SET_COOKIE]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(
            set.contains("HttpOnly") && set.contains("SameSite=Strict"),
            "{set}"
        );
        assert!(!set.contains(key));
        set.split(';').next().unwrap().to_owned()
    }

    fn base(&self, subject: &str) -> String {
        format!("/s/{}/{subject}", self.namespace)
    }

    /// Every page of `subject`'s scope, as paths.
    fn pages_of(&self, subject: &str, thread: &ConversationId) -> Vec<String> {
        let base = self.base(subject);
        vec![
            base.clone(),
            format!("{base}/conversations"),
            format!("{base}/conversations/{}", thread.as_str()),
            format!("{base}/facts"),
            format!("{base}/facts?q=secret"),
            format!("{base}/facts/history?key=motto"),
            format!("{base}/working"),
            format!("{base}/working?conversation={}", thread.as_str()),
            format!("{base}/recall?conversation={}&q=secret", thread.as_str()),
            format!(
                "{base}/recall?conversation={}&q=what+is+my+cat+called",
                self.alice_trip.as_str()
            ),
            format!("{base}/erase"),
            format!("{base}/export"),
            format!("{base}/stores"),
        ]
    }
}

/// A conversation with an unanswered tool call, a fact with history, the planted facts and a
/// working-memory document.
async fn seed(store: &dyn MemoryBackend, scope: &Scope, who: &str) -> ConversationId {
    let thread = store
        .create_conversation(
            scope,
            NewConversation::default().with_title(format!("{who}'s trip")),
        )
        .await
        .unwrap()
        .id;
    let messages = vec![
        Message::user(format!("the secret of {who} is kept here")),
        Message::new(
            Role::Assistant,
            vec![Part::tool_call(
                "c1",
                "lookup",
                serde_json::json!({"q": who}),
            )],
        ),
        Message::user("never mind"),
        Message::assistant("ok"),
    ];
    store
        .append(scope, &thread, messages, AppendOptions::default())
        .await
        .unwrap();
    for text in [
        format!("{who} likes tea"),
        format!("{who} likes coffee now"),
    ] {
        store
            .remember(
                scope,
                mnemix_core::NewFact::new(text).with_key("motto"),
                RememberOptions::default(),
            )
            .await
            .unwrap();
    }
    for text in PLANTED {
        store
            .remember(
                scope,
                mnemix_core::NewFact::new(text),
                RememberOptions::default(),
            )
            .await
            .unwrap();
    }
    store
        .set_working_memory(
            scope,
            &WorkingMemoryKey::User,
            WorkingMemoryUpdate::markdown(format!("# {who}\n- secret notes")),
        )
        .await
        .unwrap();
    thread
}

/// Sixteen turns through the engine: the cat's name is said early, far before the window.
async fn trip(inspector: &Inspector, scope: &Scope) -> ConversationId {
    let (thread, _) = inspector
        .memory
        .auto_conversation(scope, "trip", 0)
        .await
        .unwrap();
    let said = [
        "My cat is called Miso and she hates the car",
        "Noted, Miso stays home",
        "I fly to Lisbon in May",
        "Lisbon in May is lovely",
        "Book a hotel near the river",
        "Looking at hotels by the Tagus",
        "I prefer a window seat",
        "Window seat noted",
        "Dinner somewhere with fish",
        "There are good places in Alfama",
        "Also a day trip to Sintra",
        "Sintra by train is easy",
        "What about the weather",
        "Mild and sunny in May",
        "Great, thanks",
        "Anything else?",
    ];
    let messages = said.iter().enumerate().map(|(i, text)| {
        if i % 2 == 0 {
            Message::user(*text)
        } else {
            Message::assistant(*text)
        }
    });
    inspector
        .memory
        .commit(scope, &thread.id, messages.collect())
        .await
        .unwrap();
    thread.id
}

fn csrf_of(page: &str) -> String {
    let at = page
        .find("name=\"csrf\" value=\"")
        .expect("a form with a token")
        + 19;
    page[at..at + 64].to_owned()
}

/// Everything an attacker tries, on one backend.
async fn attacker_calls(url: &str) {
    let world = World::new(url, true).await;
    let alice = world.login(&world.alice).await;

    // Alice sees every page of her own scope.
    for path in world.pages_of("alice", &world.alice_thread) {
        let answer = world.get(&path, Some(&alice)).await;
        assert_eq!(answer.status, StatusCode::OK, "{path}: {}", answer.body);
        assert!(!answer.body.contains(&world.alice), "{path} shows the key");
        assert!(!answer.body.contains("secret of bob"), "{path}");
    }
    // Bob's pages, guessed or learned, are 404 to her, as a subject that does not exist is.
    let missing = world
        .get(&format!("{}/facts", world.base("nobody")), Some(&alice))
        .await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    for path in world.pages_of("bob", &world.bob_thread) {
        let answer = world.get(&path, Some(&alice)).await;
        assert_eq!(answer.status, StatusCode::NOT_FOUND, "{path}");
        assert_eq!(answer.body, missing.body, "{path}");
    }
    // Bob's conversation id under her own scope: 404 too.
    let foreign = world
        .get(
            &format!(
                "{}/conversations/{}",
                world.base("alice"),
                world.bob_thread.as_str()
            ),
            Some(&alice),
        )
        .await;
    assert_eq!(foreign.status, StatusCode::NOT_FOUND);
    // Another namespace, and the admin's namespace list, are not hers either.
    let other = world.get("/ns/elsewhere", Some(&alice)).await;
    assert_eq!(other.status, StatusCode::NOT_FOUND);
    let home = world.get("/", Some(&alice)).await;
    assert_eq!(home.status, StatusCode::SEE_OTHER);
    let namespace = world
        .get(&format!("/ns/{}", world.namespace), Some(&alice))
        .await;
    assert!(namespace.body.contains("alice") && !namespace.body.contains(">bob<"));

    // Planted markup renders as text under a policy that runs no script.
    let facts = world
        .get(&format!("{}/facts", world.base("alice")), Some(&alice))
        .await;
    let policy = facts.headers["content-security-policy"].to_str().unwrap();
    assert!(policy.contains("default-src 'none'") && !policy.contains("unsafe-inline"));
    assert!(facts.body.contains("&lt;script&gt;"), "{}", facts.body);
    assert!(!facts.body.contains("<script"));
    assert!(!facts.body.contains("<img"));
    assert!(!facts.body.contains("href=\"javascript:"));

    // Writes: no cookie, no token, a stale token, another origin: all refused, nothing written.
    let working = format!("{}/working", world.base("alice"));
    let page = world.get(&working, Some(&alice)).await.body;
    let token = csrf_of(&page);
    let edit = |token: &'static str| {
        vec![
            ("csrf", token),
            ("revision", "1"),
            ("format", "markdown"),
            ("content", "overwritten"),
        ]
    };
    let refusals = [
        world.post(&working, None, &edit("")).await,
        world.post(&working, Some(&alice), &edit("")).await,
        world
            .post(
                &working,
                Some(&alice),
                &edit("0000000000000000000000000000000000000000000000000000000000000000"),
            )
            .await,
    ];
    for refusal in &refusals {
        assert_eq!(refusal.status, StatusCode::FORBIDDEN, "{}", refusal.body);
    }
    let token: &'static str = Box::leak(token.into_boxed_str());
    let cross = world
        .post_from(
            &working,
            Some(&alice),
            &edit(token),
            Some("http://evil.example"),
        )
        .await;
    assert_eq!(cross.status, StatusCode::FORBIDDEN);
    let mut cross_site = Request::post(&working)
        .header(header::HOST, HOST)
        .header("sec-fetch-site", "cross-site")
        .header(header::COOKIE, &alice)
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from(
            serde_urlencoded::to_string(edit(token)).unwrap(),
        ))
        .unwrap();
    cross_site.headers_mut().remove(header::ORIGIN);
    assert_eq!(world.send(cross_site).await.status, StatusCode::FORBIDDEN);
    // Her token on Bob's scope: 404, and Bob's document is untouched.
    let into_bob = world
        .post(
            &format!("{}/working", world.base("bob")),
            Some(&alice),
            &edit(token),
        )
        .await;
    assert_eq!(into_bob.status, StatusCode::NOT_FOUND);
    let scope = |who: &str| Scope::new(world.namespace.clone(), who).unwrap();
    let document = |who: &'static str| {
        let store = Arc::clone(&world.inspector.store);
        let scope = scope(who);
        async move {
            store
                .get_working_memory(&scope, &WorkingMemoryKey::User)
                .await
                .unwrap()
                .unwrap()
        }
    };
    assert_eq!(document("alice").await.revision, 1);
    assert_eq!(document("bob").await.content, "# bob\n- secret notes");

    // A compare-and-set edit: the right revision saves, a stale one shows the newer text.
    let saved = world.post(&working, Some(&alice), &edit(token)).await;
    assert_eq!(saved.status, StatusCode::SEE_OTHER, "{}", saved.body);
    assert_eq!(document("alice").await.content, "overwritten");
    let mut stale = edit(token);
    stale[3] = ("content", "a stale edit");
    let conflict = world.post(&working, Some(&alice), &stale).await;
    assert_eq!(conflict.status, StatusCode::CONFLICT);
    assert!(conflict.body.contains("overwritten") && conflict.body.contains("a stale edit"));
    assert_eq!(document("alice").await.content, "overwritten");

    // Erasure: a wrong confirmation erases nothing; the right one gives the receipt.
    let erase = format!("{}/erase", world.base("alice"));
    let wrong = world
        .post(&erase, Some(&alice), &[("csrf", token), ("confirm", "bob")])
        .await;
    assert_eq!(wrong.status, StatusCode::BAD_REQUEST);
    let erased = world
        .post(
            &erase,
            Some(&alice),
            &[("csrf", token), ("confirm", "alice")],
        )
        .await;
    assert_eq!(erased.status, StatusCode::OK, "{}", erased.body);
    assert!(erased.body.contains("Receipt"));
    // The feed records the edit and the erasure as Alice's key's, not the server's.
    if world.inspector.store.capabilities().change_feed {
        let namespace = mnemix_core::Namespace::new(&world.namespace).unwrap();
        let feed = world
            .inspector
            .store
            .changes(&namespace, mnemix_core::ChangeCursor::START, 1_000)
            .await
            .unwrap();
        let last_by = |operation| {
            let change = feed.iter().rev().find(|c| c.operation == operation);
            change.map(|c| (c.principal.kind, c.principal.label.clone()))
        };
        let alice_key = Some((mnemix_core::PrincipalKind::Key, Some("alice".to_owned())));
        assert_eq!(last_by(mnemix_core::Operation::SetWorkingMemory), alice_key);
        assert_eq!(last_by(mnemix_core::Operation::Erase), alice_key);
    }
    let after = world
        .get(&format!("{}/facts", world.base("alice")), Some(&alice))
        .await;
    assert!(after.body.contains("No facts match."));
    assert!(world
        .inspector
        .store
        .get_working_memory(&scope("bob"), &WorkingMemoryKey::User)
        .await
        .unwrap()
        .is_some());

    // The admin key sees both subjects; Bob's own key still sees his.
    let admin = world.login(&world.admin).await;
    let subjects = world
        .get(&format!("/ns/{}", world.namespace), Some(&admin))
        .await;
    assert!(subjects.body.contains(">bob<"), "{}", subjects.body);
    let bob = world.login(&world.bob).await;
    assert_eq!(
        world.get(&world.base("bob"), Some(&bob)).await.status,
        StatusCode::OK
    );

    // Revoking Bob's key ends his session at once; logging out ends Alice's.
    revoke(&world.keys, None, Some("bob")).unwrap();
    world.inspector.reload_keys(true);
    let revoked = world.get(&world.base("bob"), Some(&bob)).await;
    assert_eq!(revoked.status, StatusCode::SEE_OTHER);
    assert_eq!(revoked.headers[header::LOCATION], "/login");
    let out = world
        .post("/logout", Some(&alice), &[("csrf", token)])
        .await;
    assert_eq!(out.status, StatusCode::SEE_OTHER);
    let gone = world.get(&world.base("alice"), Some(&alice)).await;
    assert_eq!(gone.status, StatusCode::SEE_OTHER);
    assert_eq!(
        world
            .post(&working, Some(&alice), &edit(token))
            .await
            .status,
        StatusCode::FORBIDDEN
    );
}

#[tokio::test]
async fn attacker_calls_on_memory() {
    attacker_calls("memory://").await;
}

#[tokio::test]
async fn attacker_calls_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    attacker_calls(&format!("sqlite://{}", dir.path().join("ui.db").display())).await;
}

#[tokio::test]
async fn attacker_calls_on_postgres() {
    if let Some(url) = server("postgres", mnemix_testkit::services::Service::Postgres) {
        attacker_calls(&url).await;
    }
}

#[tokio::test]
async fn attacker_calls_on_redis() {
    if let Some(url) = server("redis", mnemix_testkit::services::Service::Redis) {
        attacker_calls(&url).await;
    }
}

#[tokio::test]
async fn attacker_calls_on_redis_cluster() {
    if let Some(seeds) = server(
        "redis-cluster",
        mnemix_testkit::services::Service::RedisCluster,
    ) {
        let nodes: Vec<&str> = seeds
            .split(',')
            .map(|url| url.trim().trim_start_matches("redis://"))
            .collect();
        attacker_calls(&format!("redis+cluster://{}", nodes.join(","))).await;
    }
}

/// The service's URL, or `None` (a named skip) when it cannot be reached and is not required.
fn server(name: &str, service: mnemix_testkit::services::Service) -> Option<String> {
    match mnemix_testkit::services::locate(service) {
        Ok(url) => Some(url),
        Err(why) if !mnemix_conformance::is_required(name) => {
            eprintln!("SKIP inspector::attacker_calls_on_{name}: {why:?}");
            None
        }
        Err(why) => panic!("{name} is required: {why:?}"),
    }
}

#[tokio::test]
async fn a_read_only_inspector_refuses_every_write() {
    let world = World::new("memory://", false).await;
    let alice = world.login(&world.alice).await;
    let page = world
        .get(&format!("{}/working", world.base("alice")), Some(&alice))
        .await;
    assert!(page.body.contains("Read-only"));
    let token = csrf_of(&page.body);
    for (path, form) in [
        (
            "working",
            vec![
                ("csrf", token.as_str()),
                ("revision", "1"),
                ("content", "x"),
            ],
        ),
        (
            "erase",
            vec![("csrf", token.as_str()), ("confirm", "alice")],
        ),
    ] {
        let answer = world
            .post(
                &format!("{}/{path}", world.base("alice")),
                Some(&alice),
                &form,
            )
            .await;
        assert_eq!(
            answer.status,
            StatusCode::FORBIDDEN,
            "{path}: {}",
            answer.body
        );
    }
    let facts = world
        .get(&format!("{}/facts", world.base("alice")), Some(&alice))
        .await;
    assert!(facts.body.contains("likes coffee now"));
}

#[tokio::test]
async fn a_wrong_key_or_host_gets_nothing() {
    let world = World::new("memory://", false).await;
    let refused = world.post("/login", None, &[("key", "amk_guess")]).await;
    assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
    assert!(!refused.headers.contains_key(header::SET_COOKIE));
    let anonymous = world.get(&world.base("alice"), None).await;
    assert_eq!(anonymous.status, StatusCode::SEE_OTHER);
    // DNS rebinding: a page on another name that now resolves here.
    let alice = world.login(&world.alice).await;
    let rebound = world
        .send(
            Request::get(world.base("alice"))
                .header(header::HOST, "evil.example:8732")
                .header(header::COOKIE, &alice)
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(rebound.status, StatusCode::MISDIRECTED_REQUEST);
    assert!(!rebound.headers.contains_key("access-control-allow-origin"));
}

#[tokio::test]
async fn the_conversation_page_marks_what_replay_leaves_out() {
    let world = World::new("memory://", false).await;
    let alice = world.login(&world.alice).await;
    let page = world
        .get(
            &format!(
                "{}/conversations/{}",
                world.base("alice"),
                world.alice_thread.as_str()
            ),
            Some(&alice),
        )
        .await;
    assert!(page.body.contains("removed by sanitizing"), "{}", page.body);
    assert!(page.body.contains("tool call"));
}

#[tokio::test]
async fn recall_explained_shows_the_recalled_message_and_its_signals() {
    let world = World::new("memory://", false).await;
    let alice = world.login(&world.alice).await;
    let page = world
        .get(
            &format!(
                "{}/recall?conversation={}&q=what+is+my+cat+called",
                world.base("alice"),
                world.alice_trip.as_str()
            ),
            Some(&alice),
        )
        .await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    let recalled = page
        .body
        .find("<tr class=\"recalled\"")
        .expect("a recalled row");
    let row = &page.body[recalled..recalled + page.body[recalled..].find("</tr>").unwrap()];
    assert!(row.contains("My cat is called Miso"), "{row}");
    assert!(row.contains(">recalled<"), "{row}");
    assert!(page.body.contains("in the window already") || page.body.contains("cut:"));
}

#[tokio::test]
async fn view_as_shows_what_a_grant_lets_the_grantee_read_and_nothing_more() {
    let world = World::new("memory://", false).await;
    let alice = Scope::new(world.namespace.clone(), "alice").unwrap();
    world
        .inspector
        .store
        .remember(
            &alice,
            mnemix_core::NewFact::new("alice shares her itinerary").with_tags(["shared"]),
            RememberOptions::default(),
        )
        .await
        .unwrap();
    let mut grant = mnemix_core::registry::Grant::new(
        mnemix_core::Subject::new("alice").unwrap(),
        mnemix_core::Subject::new("bob").unwrap(),
    );
    grant.tags = vec!["shared".into()];
    world
        .inspector
        .memories
        .grant(alice.namespace(), grant)
        .await
        .unwrap();
    let bob = world.login(&world.bob).await;
    let page = world.get(&world.base("bob"), Some(&bob)).await;
    assert!(
        page.body.contains("alice shares her itinerary"),
        "{}",
        page.body
    );
    assert!(
        !page.body.contains("alice likes coffee now"),
        "{}",
        page.body
    );
    assert!(!page.body.contains("secret of alice"));
    // Reading through the grant gives Bob no page of Alice's.
    let hers = world
        .get(&format!("{}/facts", world.base("alice")), Some(&bob))
        .await;
    assert_eq!(hers.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn the_export_is_the_verified_file_import_reads() {
    let world = World::new("memory://", false).await;
    let alice = world.login(&world.alice).await;
    let export = world
        .get(&format!("{}/export", world.base("alice")), Some(&alice))
        .await;
    assert_eq!(export.status, StatusCode::OK);
    let reader = mnemix_core::transfer::ExportReader::new(export.body.as_bytes()).unwrap();
    let records: Vec<_> = reader.collect::<Result<_, _>>().unwrap();
    assert!(records.iter().all(|r| r
        .scope()
        .is_some_and(|s| s.subject().is_some_and(|s| s.as_str() == "alice"))));
    assert!(records.len() >= 8, "{}", records.len());
}

#[tokio::test]
async fn without_a_key_file_the_loopback_sees_all_and_writes_still_need_the_token() {
    let store = mnemix::open("memory://").await.unwrap().backend();
    let scope = Scope::new("default", "carol").unwrap();
    seed(store.as_ref(), &scope, "carol").await;
    let inspector = Arc::new(
        Inspector::new(
            store,
            Settings {
                writable: true,
                ..Settings::new(default_memory_config())
            },
        )
        .unwrap(),
    );
    let app = router(inspector);
    let get = |path: &str| {
        Request::get(path)
            .header(header::HOST, "localhost:8732")
            .body(Body::empty())
            .unwrap()
    };
    let page = app
        .clone()
        .oneshot(get("/s/default/carol/working"))
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let forged = Request::post("/s/default/carol/working")
        .header(header::HOST, "localhost:8732")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from("revision=1&content=x"))
        .unwrap();
    assert_eq!(
        app.oneshot(forged).await.unwrap().status(),
        StatusCode::FORBIDDEN
    );
}
