//! `mnemix mcp` through an MCP client nobody here wrote — the official Python SDK
//! (`tests/mcp/client.py`) — over stdio and streamable HTTP: every tool listed and called, a
//! missing or wrong key refused, and another tenant's data never returned.
//!
//! The client runs on `MNEMIX_TEST_MCP_PYTHON` (`cargo xtask test` makes a virtual environment
//! with the SDK in `target/mcp-client`), else on `python3`. Without the SDK this is a named
//! skip, or a failure when `MNEMIX_TEST_REQUIRE` names `mcp`.
#![cfg(feature = "sqlite")]

use std::io::Write as _;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use mnemix_core::{Message, WorkingMemoryKey, WorkingMemoryUpdate};
use serde_json::{json, Value};

const BINARY: &str = env!("CARGO_BIN_EXE_mnemix");
const CLIENT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp/client.py");

/// The tools, in the order the server lists them is not promised: compared as a set.
const TOOLS: [&str; 11] = [
    "forget",
    "get_working_memory",
    "list_conversations",
    "list_memory_kinds",
    "recall",
    "remember",
    "search_memories",
    "search_memory",
    "show_conversation",
    "store_memory",
    "update_working_memory",
];

/// Bob's data, seeded straight into the store: no answer to Ada may contain it. Its marks are
/// words no id, timestamp or hex digest can hold (a number could: "9931" was once in a
/// timestamp of an honest answer).
const BOBS_SECRET: &str = "Bob's vault code is quokka";
/// Bob's structured memory (a `Preference`): no answer to Ada may contain it either.
const BOBS_PIN: &str = "the pin is walrus";

/// The Pythons with the SDK, one per SDK line tested: `MNEMIX_TEST_MCP_PYTHON` lists them as
/// `PATH` does (`cargo xtask test` makes a 2.x and a 1.x environment), else `python3`.
fn pythons() -> Vec<String> {
    std::env::var_os("MNEMIX_TEST_MCP_PYTHON").map_or_else(
        || vec!["python3".to_owned()],
        |list| {
            std::env::split_paths(&list)
                .map(|p| p.to_string_lossy().into_owned())
                .collect()
        },
    )
}

fn python_client_available() -> bool {
    let missing: Vec<String> = pythons()
        .into_iter()
        .filter(|python| {
            !Command::new(python)
                .args(["-c", "import mcp"])
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
        .collect();
    if !missing.is_empty() {
        assert!(
            !mnemix_conformance::is_required("mcp"),
            "MNEMIX_TEST_REQUIRE names mcp, but {missing:?} cannot import mcp (pip install mcp)"
        );
        eprintln!("SKIP mcp: {missing:?} has no `mcp` package (pip install mcp)");
    }
    missing.is_empty()
}

/// Runs the Python client (of the first SDK line) on a plan and returns its JSON answer.
fn client(plan: &Value) -> Value {
    client_on(&pythons()[0], plan)
}

/// Runs the Python client on `python` and returns its JSON answer. The client must not log a
/// failure of its own (the 2.x SDK logs a session ended with a status it does not accept).
fn client_on(python: &str, plan: &Value) -> Value {
    let mut child = Command::new(python)
        .arg(CLIENT)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(plan.to_string().as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the client failed: {stderr}");
    assert!(
        !stderr.contains("failed"),
        "the client logged a failure: {stderr}"
    );
    serde_json::from_slice(&output.stdout).expect("the client prints JSON")
}

/// Two tenants' data in one store: Ada's conversation, and Bob's fact, conversation and
/// working memory.
async fn seed(url: &str) -> String {
    let store = mnemix::open(url).await.unwrap();
    let bob = store.scope("acme", "bob").unwrap();
    bob.facts().remember(BOBS_SECRET).await.unwrap();
    let memories = mnemix::engine::Memories::new(store.backend());
    let schema = json!({"type": "object", "required": ["category", "value"],
        "properties": {"category": {"type": "string"}, "value": {"type": "string"}}});
    let kind = mnemix::registry::KindSpec::new("Preference", schema).unique_on(["category"]);
    memories
        .register_kind(bob.scope().namespace(), kind)
        .await
        .unwrap();
    let secret = json!({"category": "pin", "value": BOBS_PIN});
    memories
        .store(
            bob.scope(),
            mnemix::engine::NewMemory::new("Preference", secret),
        )
        .await
        .unwrap();
    let thread = bob.new_conversation().title("bob's thread").await.unwrap();
    bob.conversation(&thread.id)
        .append([Message::user(BOBS_SECRET)])
        .await
        .unwrap();
    store
        .set_working_memory(
            bob.scope(),
            &WorkingMemoryKey::User,
            WorkingMemoryUpdate::markdown(BOBS_SECRET),
        )
        .await
        .unwrap();
    let ada = store.scope("acme", "ada").unwrap();
    let thread = ada.new_conversation().title("planning").await.unwrap();
    ada.conversation(&thread.id)
        .append([
            Message::user("Book the train to Oslo"),
            Message::assistant("Booked for Friday."),
        ])
        .await
        .unwrap();
    bob_thread_id(&store).await
}

async fn bob_thread_id(store: &mnemix_core::Store) -> String {
    let bob = store.scope("acme", "bob").unwrap();
    let page = bob.conversations().await.unwrap();
    page.items[0].id.as_str().to_owned()
}

/// Ada's session: every tool, then Bob's data asked for in every way a prompt could try.
fn ada_calls(bob_thread: &str) -> Value {
    json!([
        {"name": "remember", "arguments": {"text": "Prefers tea to coffee", "kind": "preference", "key": "drink"}},
        {"name": "remember", "arguments": {"text": "Prefers lemon tea", "kind": "preference", "key": "drink", "tags": ["tea"]}},
        {"name": "recall", "arguments": {"query": "which tea does she prefer", "limit": 5}},
        {"name": "search_memory", "arguments": {"query": "lemon tea", "mode": "lexical"}},
        {"name": "search_memory", "arguments": {"query": "tea"}},
        {"name": "get_working_memory", "arguments": {}},
        {"name": "update_working_memory", "arguments": {"content": "# Ada\n- travels Friday"}},
        {"name": "update_working_memory", "arguments": {"content": "stale", "expected_revision": 0}},
        {"name": "get_working_memory", "arguments": {}},
        {"name": "list_conversations", "arguments": {}},
        {"name": "show_conversation", "arguments": {"conversation_id": "$9.conversations.0.id"}},
        {"name": "forget", "arguments": {"id": "$1.fact.id"}},
        {"name": "recall", "arguments": {"query": "lemon tea"}},
        // Another tenant's data, by every door.
        {"name": "show_conversation", "arguments": {"conversation_id": bob_thread}},
        {"name": "recall", "arguments": {"query": "vault code"}},
        {"name": "search_memory", "arguments": {"query": "vault code", "mode": "lexical"}},
        {"name": "search_memory", "arguments": {"query": "Bob's vault code is quokka"}},
        {"name": "recall", "arguments": {"query": "vault code", "subject": "bob", "namespace": "acme"}},
        // Structured memories (18–23): the kinds, a store and its supersede, a search of one's
        // own, and of what others shared (nothing: Bob granted nothing).
        {"name": "list_memory_kinds", "arguments": {}},
        {"name": "store_memory", "arguments": {"kind": "Preference", "data": {"category": "drink", "value": "tea"}}},
        {"name": "store_memory", "arguments": {"kind": "Preference", "data": {"category": "drink", "value": "lemon tea"}, "ttl": "7d"}},
        {"name": "store_memory", "arguments": {"kind": "Preference", "data": {"category": "drink"}}},
        {"name": "search_memories", "arguments": {"query": "drink", "kind": "Preference"}},
        {"name": "search_memories", "arguments": {"query": "pin", "scope": "shared"}},
        // Who wrote it (24–25): the server's own record of the caller, whatever the call says.
        {"name": "remember", "arguments": {"text": "Is the administrator", "written_by": "key:admin", "origin": "user", "provenance": {"written_by": {"kind": "key", "id": "admin"}}}},
        {"name": "remember", "arguments": {"text": "Travels by train"}},
        // When it was true, and recall filtered by the server's record (26–32).
        {"name": "remember", "arguments": {"text": "Lives in Paris", "key": "city", "valid_from": "2025-01-01"}},
        {"name": "remember", "arguments": {"text": "Lives in Lyon", "key": "city", "valid_from": "2026-03-01"}},
        {"name": "recall", "arguments": {"query": "lives", "as_of": "2025-06-01"}},
        {"name": "recall", "arguments": {"query": "lives", "origins": ["api"]}},
        {"name": "recall", "arguments": {"query": "lives", "written_by": ["extractor:nobody"]}},
        {"name": "recall", "arguments": {"query": "lives", "origins": ["rumour"]}},
        {"name": "recall", "arguments": {"query": "lives", "as_of": "2026-02-30"}},
    ])
}

/// What Ada's session must show, on either transport.
fn check_ada(answer: &Value) {
    let mut listed: Vec<&str> = answer["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    listed.sort_unstable();
    assert_eq!(listed, TOOLS);
    for tool in answer["tools"].as_array().unwrap() {
        let schema = &tool["input_schema"];
        assert_eq!(schema["type"], "object", "{tool}");
        for scoped in ["namespace", "subject"] {
            assert!(
                schema["properties"].get(scoped).is_none(),
                "no tool takes a scope: {tool}"
            );
        }
    }
    let r = answer["results"].as_array().unwrap();
    let ok = |i: usize| {
        assert!(!r[i]["is_error"].as_bool().unwrap(), "call {i}: {}", r[i]);
        &r[i]["structured"]
    };
    assert_eq!(ok(0)["status"], "created");
    assert_eq!(ok(1)["status"]["superseded"], ok(0)["fact"]["id"]);
    let recalled = ok(2)["facts"].as_array().unwrap();
    assert_eq!(
        recalled.len(),
        1,
        "the superseded fact is history: {recalled:?}"
    );
    assert_eq!(recalled[0]["text"], "Prefers lemon tea");
    assert_eq!(ok(3)["results"][0]["text"], "Prefers lemon tea");
    assert_eq!(ok(3)["results"][0]["source"], "fact");
    assert_eq!(ok(4)["results"][0]["text"], "Prefers lemon tea");
    assert_eq!(ok(5)["working_memory"], Value::Null);
    assert_eq!(ok(6)["working_memory"]["revision"], 1);
    assert!(
        r[7]["is_error"].as_bool().unwrap(),
        "a stale revision is refused"
    );
    assert_eq!(r[7]["structured"]["kind"], "conflict");
    assert_eq!(
        ok(8)["working_memory"]["content"],
        "# Ada\n- travels Friday"
    );
    let conversations = ok(9)["conversations"].as_array().unwrap();
    assert_eq!(
        conversations.len(),
        1,
        "Ada's one conversation: {conversations:?}"
    );
    assert_eq!(conversations[0]["title"], "planning");
    let shown = ok(10)["messages"].as_array().unwrap();
    assert_eq!(shown.len(), 2);
    assert_eq!(shown[0]["text"], "Book the train to Oslo");
    assert_eq!(ok(11)["forgotten"], true);
    assert_eq!(ok(12)["facts"].as_array().unwrap().len(), 0);

    assert_eq!(r[13]["structured"]["kind"], "not_found", "{}", r[13]);
    assert_eq!(ok(14)["facts"].as_array().unwrap().len(), 0);
    assert_eq!(ok(15)["results"].as_array().unwrap().len(), 0);
    assert!(
        ok(16)["results"]
            .as_array()
            .unwrap()
            .iter()
            .all(|hit| hit["source"] == "fact" && hit["text"] != BOBS_SECRET),
        "{}",
        r[16]
    );
    assert!(
        r[17]["is_error"].as_bool().unwrap(),
        "a scope argument is refused"
    );
    let kinds = ok(18)["kinds"].as_array().unwrap();
    assert_eq!(kinds.len(), 1);
    assert_eq!(kinds[0]["name"], "Preference");
    assert_eq!(kinds[0]["unique_on"], json!(["category"]));
    assert_eq!(ok(19)["status"], "created");
    assert_eq!(ok(20)["status"]["superseded"], ok(19)["memory"]["version"]);
    assert_eq!(ok(20)["memory"]["id"], ok(19)["memory"]["id"]);
    assert!(ok(20)["memory"]["expires_at"].is_i64());
    assert!(r[21]["is_error"].as_bool().unwrap(), "data off its schema");
    assert_eq!(r[21]["structured"]["kind"], "invalid_input");
    let found = ok(22)["memories"].as_array().unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0]["memory"]["data"]["value"], "lemon tea");
    assert_eq!(found[0]["memory"]["is_latest"], true);
    assert_eq!(found[0]["source"], "own");
    assert_eq!(ok(23)["memories"], json!([]));
    // A field naming the writer is refused (the tools take no such field), or if a client
    // slipped one past, it named no one: every fact is the caller's.
    if !r[24]["is_error"].as_bool().unwrap() {
        assert_ne!(ok(24)["fact"]["written_by"], "key:admin", "{}", r[24]);
    }
    let written_by = ok(25)["fact"]["written_by"].as_str().unwrap();
    assert!(
        written_by == "command" || written_by.starts_with("key:"),
        "the stdio server writes as the command, an HTTP one as the caller's key: {written_by}"
    );
    assert_eq!(ok(25)["fact"]["origin"], "api");
    let day = |y, m, d| json!(mnemix_core::Timestamp::from_utc(y, m, d, 0, 0));
    assert_eq!(ok(26)["fact"]["valid_from"], day(2025, 1, 1));
    assert_eq!(ok(27)["status"]["superseded"], ok(26)["fact"]["id"]);
    let texts = |i: usize| -> Vec<String> {
        ok(i)["facts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["text"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(texts(28), ["Lives in Paris"], "what was true in June 2025");
    assert!(texts(29).contains(&"Lives in Lyon".to_owned()), "{}", r[29]);
    assert!(texts(29).iter().all(|t| t != "Lives in Paris"), "{}", r[29]);
    assert_eq!(texts(30), Vec::<String>::new(), "no fact by that writer");
    for refused in [31, 32] {
        assert_eq!(
            r[refused]["structured"]["kind"], "invalid_input",
            "{}",
            r[refused]
        );
    }
    assert!(
        !answer.to_string().contains("quokka") && !answer.to_string().contains("walrus"),
        "0 rows of another tenant: {answer}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_serves_every_tool_in_the_configured_scope_only() {
    if !python_client_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for (line, python) in pythons().iter().enumerate() {
        // Each SDK line's run starts from a freshly seeded store.
        let url = format!("sqlite://{}/memory-{line}.db", dir.path().display());
        let bob_thread = seed(&url).await;
        let answer = client_on(
            python,
            &json!({
                "transport": "stdio",
                "command": BINARY,
                "args": ["--url", url, "--namespace", "acme", "mcp", "--subject", "ada"],
                "calls": ada_calls(&bob_thread),
            }),
        );
        check_ada(&answer);
    }
}

/// A running `mnemix mcp --http`, stopped on drop.
struct HttpServer {
    child: Child,
    url: String,
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn make_key(dir: &Path, keys: &Path, args: &[&str]) -> String {
    let output = Command::new(BINARY)
        .args(["--namespace", "acme", "mcp", "key", "--keys"])
        .arg(keys)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}

fn start_http(store_url: &str, keys: &Path) -> HttpServer {
    start_http_with(store_url, keys, &[])
}

/// The server with more arguments (`--max-sessions-per-key`, …).
fn start_http_with(store_url: &str, keys: &Path, more: &[&str]) -> HttpServer {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(BINARY)
        .args(["--url", store_url, "--namespace", "acme", "mcp", "--http"])
        .arg(format!("127.0.0.1:{port}"))
        .arg("--keys")
        .arg(keys)
        .args(more)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the server did not listen"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    HttpServer {
        child,
        url: format!("http://127.0.0.1:{port}/mcp"),
    }
}

fn bearer(key: &str) -> Value {
    json!({ "Authorization": format!("Bearer {key}") })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_serves_each_key_its_own_scope_and_refuses_the_rest() {
    if !python_client_available() {
        return;
    }
    for python in &pythons() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}/memory.db", dir.path().display());
        let bob_thread = seed(&url).await;
        let keys = dir.path().join("keys.json");
        let ada = make_key(dir.path(), &keys, &["--subject", "ada", "--label", "ada"]);
        let bob = make_key(dir.path(), &keys, &["--subject", "bob"]);
        let admin = make_key(dir.path(), &keys, &["--admin"]);
        let stored = std::fs::read_to_string(&keys).unwrap();
        for key in [&ada, &bob, &admin] {
            assert!(!stored.contains(&key[4..]), "keys are stored hashed");
        }
        let server = start_http(&url, &keys);

        let answer = client_on(
            python,
            &json!({
                "transport": "http",
                "url": server.url,
                "headers": bearer(&ada),
                "calls": ada_calls(&bob_thread),
            }),
        );
        check_ada(&answer);

        // Bob's key sees Bob's memory, and none of what Ada's session wrote.
        let answer = client_on(
            python,
            &json!({
                "transport": "http",
                "url": server.url,
                "headers": bearer(&bob),
                "calls": [
                    {"name": "recall", "arguments": {"query": "vault code"}},
                    {"name": "search_memory", "arguments": {"query": "tea", "mode": "lexical"}},
                    {"name": "get_working_memory", "arguments": {}},
                    {"name": "list_conversations", "arguments": {}},
                ],
            }),
        );
        let r = &answer["results"];
        assert_eq!(r[0]["structured"]["facts"][0]["text"], BOBS_SECRET);
        assert_eq!(r[1]["structured"]["results"], json!([]));
        assert_eq!(r[2]["structured"]["working_memory"]["content"], BOBS_SECRET);
        assert_eq!(r[3]["structured"]["conversations"][0]["id"], bob_thread);
        assert!(!answer.to_string().contains("Ada"), "{answer}");

        // An admin key works in the scope its headers name.
        let mut headers = bearer(&admin);
        headers["X-Memory-Namespace"] = json!("acme");
        headers["X-Memory-Subject"] = json!("bob");
        let answer = client_on(
            python,
            &json!({
                "transport": "http",
                "url": server.url,
                "headers": headers,
                "calls": [{"name": "recall", "arguments": {"query": "vault code"}}],
            }),
        );
        assert_eq!(
            answer["results"][0]["structured"]["facts"][0]["text"],
            BOBS_SECRET
        );

        // Refused before any tool runs.
        let probe = |headers: Value| {
            client(&json!({"transport": "probe", "url": server.url, "headers": headers}))["status"]
                .as_u64()
                .unwrap()
        };
        assert_eq!(probe(json!({})), 401, "no key");
        assert_eq!(probe(bearer("amk_0000")), 401, "an unknown key");
        assert_eq!(
            probe(json!({"Authorization": ada.clone()})),
            401,
            "not a bearer"
        );
        let mut wrong = ada.clone();
        let last = wrong.pop().unwrap();
        wrong.push(if last == '0' { '1' } else { '0' });
        assert_eq!(probe(bearer(&wrong)), 401, "one digit off");
        let mut elsewhere = bearer(&ada);
        elsewhere["X-Memory-Subject"] = json!("bob");
        assert_eq!(probe(elsewhere), 403, "a scoped key naming another scope");
        assert_eq!(probe(bearer(&admin)), 400, "an admin key naming no scope");
        assert_eq!(probe(bearer(&ada)), 200, "the probe itself works");
    }
}

/// The two tenants of the session tests: Ada's and Bob's keys on a server over a seeded store.
struct TwoTenants {
    server: HttpServer,
    ada: String,
    bob: String,
    admin: String,
    dir: tempfile::TempDir,
}

async fn two_tenants(server_args: &[&str]) -> TwoTenants {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/memory.db", dir.path().display());
    seed(&url).await;
    let keys = dir.path().join("keys.json");
    let ada = make_key(dir.path(), &keys, &["--subject", "ada"]);
    let bob = make_key(dir.path(), &keys, &["--subject", "bob"]);
    let admin = make_key(dir.path(), &keys, &["--admin"]);
    let server = start_http_with(&url, &keys, server_args);
    TwoTenants {
        server,
        ada,
        bob,
        admin,
        dir,
    }
}

/// Ada's requests on Bob's session, racing Bob's own with the same JSON-RPC ids: a server that
/// routes answers by session and id alone hands Ada Bob's answer and leaves Bob's call
/// unanswered. Every one of Ada's requests must be refused, and every one of Bob's answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_answers_only_the_scope_that_opened_it_under_a_race() {
    if !python_client_available() {
        return;
    }
    let tenants = two_tenants(&[]).await;
    let answer = client(&json!({
        "transport": "race",
        "url": tenants.server.url,
        "owner": tenants.bob,
        "intruder": tenants.ada,
        "rounds": 200,
        "secret": "quokka",
        "call": {"name": "recall", "arguments": {"query": "vault code"}},
    }));
    assert_eq!(answer["rounds"], 200, "stopped early: {answer}");
    assert_eq!(answer["foreign"], 0, "Ada received Bob's data: {answer}");
    assert_eq!(
        answer["unanswered"], 0,
        "Bob's calls went unanswered: {answer}"
    );
    assert_eq!(
        answer["intruder_accepted"], 0,
        "Ada's requests on Bob's session: {answer}"
    );
}

/// Requests, streams and DELETEs on another scope's session are answered exactly as on a
/// session that never existed, so a leaked id cannot even be confirmed; the owner's session
/// works on, and its own DELETE ends it with a status clients accept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_scopes_session_is_refused_as_unknown() {
    if !python_client_available() {
        return;
    }
    let tenants = two_tenants(&[]).await;
    let as_key = |key: &str, session: &str| {
        json!({"Authorization": format!("Bearer {key}"), "Mcp-Session-Id": session,
               "Mcp-Protocol-Version": "2025-06-18"})
    };
    let admin_as = |subject: &str, session: &str| {
        let mut headers = as_key(&tenants.admin, session);
        headers["X-Memory-Namespace"] = json!("acme");
        headers["X-Memory-Subject"] = json!(subject);
        headers
    };
    let list = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/list"});
    let unknown = "0123456789abcdef0123456789abcdef";
    let answer = client(&json!({
        "transport": "raw",
        "url": tenants.server.url,
        "requests": [
            // 0: Bob's session; 1: an admin session bound to Bob's scope.
            {"headers": {"Authorization": format!("Bearer {}", tenants.bob)}, "body": "initialize"},
            {"headers": admin_as("bob", ""), "body": "initialize"},
            // 2–4: a session that never existed: POST, GET, DELETE.
            {"headers": as_key(&tenants.ada, unknown), "body": list},
            {"method": "GET", "headers": as_key(&tenants.ada, unknown)},
            {"method": "DELETE", "headers": as_key(&tenants.ada, unknown)},
            // 5–7: Ada's key on Bob's session; 8–10: an admin key naming Ada on it;
            // 11: Bob's key on the admin session bound to Bob (same scope: served).
            {"headers": as_key(&tenants.ada, "$0"), "body": list},
            {"method": "GET", "headers": as_key(&tenants.ada, "$0")},
            {"method": "DELETE", "headers": as_key(&tenants.ada, "$0")},
            {"headers": admin_as("ada", "$0"), "body": list},
            {"method": "GET", "headers": admin_as("ada", "$0")},
            {"method": "DELETE", "headers": admin_as("ada", "$0")},
            {"headers": as_key(&tenants.bob, "$1"), "body": list},
            // 12: Bob's session still works; 13: Bob ends it; 14: then it is gone.
            {"headers": as_key(&tenants.bob, "$0"), "body": list},
            {"method": "DELETE", "headers": as_key(&tenants.bob, "$0")},
            {"headers": as_key(&tenants.bob, "$0"), "body": list},
        ],
    }));
    let r = answer["results"].as_array().unwrap();
    assert_eq!(r[0]["status"], 200, "{}", r[0]);
    assert_eq!(r[1]["status"], 200, "{}", r[1]);
    let refusal = |i: usize| (r[i]["status"].clone(), r[i]["body"].clone());
    assert_eq!(refusal(2).0, 404, "an unknown session: {}", r[2]);
    for (i, unknown_twin) in [(5, 2), (6, 3), (7, 4), (8, 2), (9, 3), (10, 4)] {
        assert_eq!(
            refusal(i),
            refusal(unknown_twin),
            "request {i} on a foreign session must read as unknown: {}",
            r[i]
        );
    }
    assert_eq!(r[11]["status"], 200, "same scope, other key: {}", r[11]);
    assert_eq!(
        r[12]["status"], 200,
        "the owner's session survived: {}",
        r[12]
    );
    assert!(
        r[12]["body"].as_str().unwrap().contains("recall"),
        "{}",
        r[12]
    );
    let ended = r[13]["status"].as_u64().unwrap();
    assert!(
        ended == 200 || ended == 204,
        "a DELETE clients accept: {}",
        r[13]
    );
    assert_eq!(refusal(14), refusal(2), "an ended session is unknown");
}

/// Ten `mcp key` runs at once leave ten keys, each one that was printed; `list` shows them
/// without the keys; a `revoke` is refused by the running server within seconds, with no
/// restart, and the revoked key's session ends with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_are_added_in_parallel_listed_and_revoked_while_serving() {
    if !python_client_available() {
        return;
    }
    let tenants = two_tenants(&[]).await;
    let dir = tenants.dir.path();
    let keys = dir.join("keys.json");
    let runs: Vec<Child> = (0..10)
        .map(|i| {
            Command::new(BINARY)
                .args(["--namespace", "acme", "mcp", "key", "--keys"])
                .arg(&keys)
                .args([
                    "--subject",
                    &format!("user-{i}"),
                    "--label",
                    &format!("run-{i}"),
                ])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let printed: Vec<String> = runs
        .into_iter()
        .map(|run| {
            let output = run.wait_with_output().unwrap();
            assert!(
                output.status.success(),
                "{}",
                String::from_utf8_lossy(&output.stderr)
            );
            String::from_utf8(output.stdout).unwrap().trim().to_owned()
        })
        .collect();
    let file: Value = serde_json::from_str(&std::fs::read_to_string(&keys).unwrap()).unwrap();
    assert_eq!(
        file["keys"].as_array().unwrap().len(),
        13,
        "3 keys before, 10 added: {file}"
    );

    let list = Command::new(BINARY)
        .args(["mcp", "key", "list", "--keys"])
        .arg(&keys)
        .output()
        .unwrap();
    assert!(list.status.success());
    let listed = String::from_utf8(list.stdout).unwrap();
    assert_eq!(listed.lines().count(), 13, "{listed}");
    assert!(listed.contains("acme/user-3") && listed.contains("run-3") && listed.contains("UTC"));
    assert!(listed.contains("admin"), "{listed}");
    for key in printed
        .iter()
        .chain([&tenants.ada, &tenants.bob, &tenants.admin])
    {
        assert!(
            !listed.contains(&key[4..16]),
            "list never shows a key: {listed}"
        );
    }

    // Every printed key works on the running server, which read none of them at start.
    let started = Instant::now();
    let status_of = |key: &str| {
        client(&json!({"transport": "probe", "url": tenants.server.url, "headers": bearer(key)}))
            ["status"]
            .as_u64()
            .unwrap()
    };
    while status_of(&printed[9]) != 200 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "a new key was never picked up"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    for key in &printed {
        assert_eq!(status_of(key), 200);
    }

    // Ada's open session, then her key revoked by label (`ada` has none: by id).
    let session = client(&json!({
        "transport": "raw", "url": tenants.server.url,
        "requests": [{"headers": bearer(&tenants.ada), "body": "initialize"}],
    }))["results"][0]["session"]
        .as_str()
        .unwrap()
        .to_owned();
    let ada_id = listed
        .lines()
        .find(|line| line.contains("acme/ada"))
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned();
    let revoke = Command::new(BINARY)
        .args(["mcp", "key", "revoke", "--keys"])
        .arg(&keys)
        .arg(&ada_id)
        .output()
        .unwrap();
    assert!(
        revoke.status.success(),
        "{}",
        String::from_utf8_lossy(&revoke.stderr)
    );
    assert!(String::from_utf8_lossy(&revoke.stdout).contains("acme/ada"));
    let revoked = Instant::now();
    while status_of(&tenants.ada) != 401 {
        assert!(
            revoked.elapsed() < Duration::from_secs(5),
            "the revoked key still works"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(status_of(&tenants.bob), 200, "the other keys still work");
    // SIGHUP re-reads the keys; it does not stop the server.
    let hangup = Command::new("kill")
        .args(["-HUP", &tenants.server.child.id().to_string()])
        .status()
        .unwrap();
    assert!(hangup.success());
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(status_of(&tenants.bob), 200, "the server survives SIGHUP");
    // The admin key naming Ada's scope finds her old session gone.
    let mut as_ada = bearer(&tenants.admin);
    as_ada["X-Memory-Namespace"] = json!("acme");
    as_ada["X-Memory-Subject"] = json!("ada");
    as_ada["Mcp-Session-Id"] = json!(session);
    as_ada["Mcp-Protocol-Version"] = json!("2025-06-18");
    let after = client(&json!({
        "transport": "raw", "url": tenants.server.url,
        "requests": [{"headers": as_ada, "body": {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}}],
    }));
    assert_eq!(after["results"][0]["status"], 404, "{after}");

    let revoke_label = Command::new(BINARY)
        .args(["mcp", "key", "revoke", "--keys"])
        .arg(&keys)
        .args(["--label", "run-3"])
        .output()
        .unwrap();
    assert!(revoke_label.status.success());
    let unknown = Command::new(BINARY)
        .args(["mcp", "key", "revoke", "--keys"])
        .arg(&keys)
        .args(["--label", "run-3"])
        .output()
        .unwrap();
    assert!(
        !unknown.status.success(),
        "nothing left to revoke is an error"
    );
    let file: Value = serde_json::from_str(&std::fs::read_to_string(&keys).unwrap()).unwrap();
    assert_eq!(file["keys"].as_array().unwrap().len(), 11);
}

/// A key holds at most `--max-sessions-per-key` sessions; ending one (DELETE) or leaving one
/// idle past `--session-idle` makes room, and an expired session is unknown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_capped_per_key_and_expire_when_idle() {
    if !python_client_available() {
        return;
    }
    let tenants = two_tenants(&["--max-sessions-per-key", "3", "--session-idle", "2s"]).await;
    let init = |key: &str| json!({"headers": bearer(key), "body": "initialize"});
    let on = |key: &str, i: usize| {
        json!({"Authorization": format!("Bearer {key}"), "Mcp-Session-Id": format!("${i}"),
               "Mcp-Protocol-Version": "2025-06-18"})
    };
    let list = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"});
    let answer = client(&json!({
        "transport": "raw", "url": tenants.server.url,
        "requests": [
            init(&tenants.ada), init(&tenants.ada), init(&tenants.ada),
            init(&tenants.ada),                               // 3: a fourth is refused
            init(&tenants.bob),                               // 4: another key has its own cap
            {"method": "DELETE", "headers": on(&tenants.ada, 0)},
            init(&tenants.ada),                               // 6: room again
            {"headers": on(&tenants.ada, 1), "body": list},   // 7: still open
        ],
    }));
    let r = answer["results"].as_array().unwrap();
    for i in [0, 1, 2, 4, 6, 7] {
        assert_eq!(r[i]["status"], 200, "request {i}: {}", r[i]);
    }
    assert_eq!(r[3]["status"], 429, "{}", r[3]);
    assert!(r[3]["body"]
        .as_str()
        .unwrap()
        .contains("--max-sessions-per-key"));
    assert_eq!(r[5]["status"], 204, "{}", r[5]);
    let ada_sessions: Vec<&str> = [1, 2, 6]
        .iter()
        .map(|&i| r[i]["session"].as_str().unwrap())
        .collect();

    // Idle past 2 s, every one of Ada's sessions ends, and her key may open three again.
    std::thread::sleep(Duration::from_secs(4));
    let mut requests: Vec<Value> = ada_sessions
        .iter()
        .map(|id| {
            json!({"headers": {"Authorization": format!("Bearer {}", tenants.ada),
                   "Mcp-Session-Id": id, "Mcp-Protocol-Version": "2025-06-18"}, "body": list})
        })
        .collect();
    requests.extend([init(&tenants.ada), init(&tenants.ada), init(&tenants.ada)]);
    let answer =
        client(&json!({"transport": "raw", "url": tenants.server.url, "requests": requests}));
    let r = answer["results"].as_array().unwrap();
    for expired in &r[..3] {
        assert_eq!(
            expired["status"], 404,
            "an expired session is unknown: {expired}"
        );
    }
    for opened in &r[3..6] {
        assert_eq!(opened["status"], 200, "room after expiry: {opened}");
    }
}

/// HTTP as clients send it: `bearer` in any case, a batch refused with 400 and a JSON-RPC
/// error, a body that is no JSON-RPC message 400 too, and `--http localhost:PORT`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_takes_requests_as_clients_send_them() {
    if !python_client_available() {
        return;
    }
    let tenants = two_tenants(&[]).await;
    let probe = |headers: Value| {
        client(&json!({"transport": "probe", "url": tenants.server.url, "headers": headers}))
    };
    for scheme in ["bearer", "BEARER", "Bearer"] {
        let answer = probe(json!({"Authorization": format!("{scheme} {}", tenants.ada)}));
        assert_eq!(answer["status"], 200, "{scheme}: {answer}");
    }
    assert_eq!(
        probe(json!({"Authorization": format!("Basic {}", tenants.ada)}))["status"],
        401
    );
    let one = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
    let answer = client(&json!({
        "transport": "raw", "url": tenants.server.url,
        "requests": [
            {"headers": bearer(&tenants.ada), "body": [one.clone(), one]},
            {"headers": bearer(&tenants.ada), "body": "{not json"},
            {"headers": bearer(&tenants.ada), "body": {"hello": "world"}},
        ],
    }));
    let r = answer["results"].as_array().unwrap();
    for (i, result) in r.iter().enumerate() {
        assert_eq!(result["status"], 400, "request {i}: {result}");
    }
    let batch: Value = serde_json::from_str(r[0]["body"].as_str().unwrap()).unwrap();
    assert_eq!(batch["error"]["code"], -32600, "{batch}");
    let parse: Value = serde_json::from_str(r[1]["body"].as_str().unwrap()).unwrap();
    assert_eq!(parse["error"]["code"], -32700, "{parse}");

    // A host name binds as well as an IP literal.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let keys = tenants.dir.path().join("keys.json");
    let store = format!("sqlite://{}/memory.db", tenants.dir.path().display());
    let mut child = Command::new(BINARY)
        .args([
            "--url",
            &store,
            "mcp",
            "--http",
            &format!("localhost:{port}"),
            "--keys",
        ])
        .arg(&keys)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err()
        && std::net::TcpStream::connect(("::1", port)).is_err()
    {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("--http localhost:{port} exited: {status}");
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "localhost:{port} never listened"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let answer = client(
        &json!({"transport": "probe", "url": format!("http://localhost:{port}/mcp"),
        "headers": bearer(&tenants.ada)}),
    );
    let _ = child.kill();
    let output = child.wait_with_output().unwrap();
    assert_eq!(answer["status"], 200, "{answer}");
    assert!(
        !String::from_utf8_lossy(&output.stderr).contains("warning"),
        "no clear-text warning on the loopback"
    );
    // Off the loopback, one line says that keys travel in clear.
    let mut child = Command::new(BINARY)
        .args(["--url", &store, "mcp", "--http", "0.0.0.0:0", "--keys"])
        .arg(&keys)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let warning = std::io::BufRead::lines(stderr)
        .map_while(Result::ok)
        .take(2)
        .find(|line| line.starts_with("warning:"));
    let _ = child.kill();
    let _ = child.wait();
    let warning = warning.expect("a warning for plain HTTP off the loopback");
    assert!(warning.contains("TLS"), "{warning}");
}

/// The server's resident memory, from /proc.
#[cfg(target_os = "linux")]
fn resident_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// A thousand sessions opened and abandoned (never DELETEd) take their memory with them when
/// they expire: the server's resident memory falls back by at least half of what they took.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abandoned_sessions_give_their_memory_back() {
    if !python_client_available() {
        return;
    }
    let tenants = two_tenants(&["--max-sessions-per-key", "1000", "--session-idle", "2s"]).await;
    let pid = tenants.server.child.id();
    let before = resident_kib(pid);
    let answer = client(&json!({"transport": "open", "url": tenants.server.url,
        "key": tenants.ada, "count": 1000}));
    assert_eq!(answer["opened"], 1000, "{answer}");
    let held = resident_kib(pid);
    assert!(
        held > before + 10_000,
        "1,000 sessions take memory: {before} → {held} KiB"
    );
    let started = Instant::now();
    loop {
        let now = resident_kib(pid);
        if now < held - (held - before) / 2 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_mins(1),
            "memory did not come back: {before} KiB before, {held} with the sessions, {now} after"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    // And the key may open sessions again.
    let answer = client(&json!({"transport": "open", "url": tenants.server.url,
        "key": tenants.ada, "count": 10}));
    assert_eq!(answer["opened"], 10);
}
