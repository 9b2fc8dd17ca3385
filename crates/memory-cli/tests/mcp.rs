//! `agent-memory mcp` through an MCP client nobody here wrote — the official Python SDK
//! (`tests/mcp/client.py`) — over stdio and streamable HTTP: every tool listed and called, a
//! missing or wrong key refused, and another tenant's data never returned.
//!
//! The client runs on `MEMORY_TEST_MCP_PYTHON` (`cargo xtask test` makes a virtual environment
//! with the SDK in `target/mcp-client`), else on `python3`. Without the SDK this is a named
//! skip, or a failure when `MEMORY_TEST_REQUIRE` names `mcp`.
#![cfg(feature = "sqlite")]

use std::io::Write as _;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use memory_core::{Message, WorkingMemoryKey, WorkingMemoryUpdate};
use serde_json::{json, Value};

const BINARY: &str = env!("CARGO_BIN_EXE_agent-memory");
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

/// Bob's data, seeded straight into the store: no answer to Ada may contain it.
const BOBS_SECRET: &str = "Bob's vault code is 4711";
/// Bob's structured memory (a `Preference`): no answer to Ada may contain it either.
const BOBS_PIN: &str = "the pin is 9931";

fn python() -> String {
    std::env::var("MEMORY_TEST_MCP_PYTHON").unwrap_or_else(|_| "python3".to_owned())
}

fn python_client_available() -> bool {
    let found = Command::new(python())
        .args(["-c", "import mcp"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        assert!(
            !memory_conformance::is_required("mcp"),
            "MEMORY_TEST_REQUIRE names mcp, but {} cannot import mcp (pip install mcp)",
            python()
        );
        eprintln!(
            "SKIP mcp: {} has no `mcp` package (pip install mcp)",
            python()
        );
    }
    found
}

/// Runs the Python client on a plan and returns its JSON answer.
fn client(plan: &Value) -> Value {
    let mut child = Command::new(python())
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
    assert!(
        output.status.success(),
        "the client failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("the client prints JSON")
}

/// Two tenants' data in one store: Ada's conversation, and Bob's fact, conversation and
/// working memory.
async fn seed(url: &str) -> String {
    let store = agent_memory::open(url).await.unwrap();
    let bob = store.scope("acme", "bob").unwrap();
    bob.facts().remember(BOBS_SECRET).await.unwrap();
    let memories = agent_memory::engine::Memories::new(store.backend());
    let schema = json!({"type": "object", "required": ["category", "value"],
        "properties": {"category": {"type": "string"}, "value": {"type": "string"}}});
    let kind = agent_memory::registry::KindSpec::new("Preference", schema).unique_on(["category"]);
    memories
        .register_kind(bob.scope().namespace(), kind)
        .await
        .unwrap();
    let secret = json!({"category": "pin", "value": BOBS_PIN});
    memories
        .store(
            bob.scope(),
            agent_memory::engine::NewMemory::new("Preference", secret),
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

async fn bob_thread_id(store: &memory_core::Store) -> String {
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
        {"name": "search_memory", "arguments": {"query": "Bob's vault code is 4711"}},
        {"name": "recall", "arguments": {"query": "vault code", "subject": "bob", "namespace": "acme"}},
        // Structured memories (18–23): the kinds, a store and its supersede, a search of one's
        // own, and of what others shared (nothing: Bob granted nothing).
        {"name": "list_memory_kinds", "arguments": {}},
        {"name": "store_memory", "arguments": {"kind": "Preference", "data": {"category": "drink", "value": "tea"}}},
        {"name": "store_memory", "arguments": {"kind": "Preference", "data": {"category": "drink", "value": "lemon tea"}, "ttl": "7d"}},
        {"name": "store_memory", "arguments": {"kind": "Preference", "data": {"category": "drink"}}},
        {"name": "search_memories", "arguments": {"query": "drink", "kind": "Preference"}},
        {"name": "search_memories", "arguments": {"query": "pin", "scope": "shared"}},
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
    assert!(
        !answer.to_string().contains("4711") && !answer.to_string().contains("9931"),
        "0 rows of another tenant: {answer}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_serves_every_tool_in_the_configured_scope_only() {
    if !python_client_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/memory.db", dir.path().display());
    let bob_thread = seed(&url).await;
    let answer = client(&json!({
        "transport": "stdio",
        "command": BINARY,
        "args": ["--url", url, "--namespace", "acme", "mcp", "--subject", "ada"],
        "calls": ada_calls(&bob_thread),
    }));
    check_ada(&answer);
}

/// A running `agent-memory mcp --http`, stopped on drop.
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

    let answer = client(&json!({
        "transport": "http",
        "url": server.url,
        "headers": bearer(&ada),
        "calls": ada_calls(&bob_thread),
    }));
    check_ada(&answer);

    // Bob's key sees Bob's memory, and none of what Ada's session wrote.
    let answer = client(&json!({
        "transport": "http",
        "url": server.url,
        "headers": bearer(&bob),
        "calls": [
            {"name": "recall", "arguments": {"query": "vault code"}},
            {"name": "search_memory", "arguments": {"query": "tea", "mode": "lexical"}},
            {"name": "get_working_memory", "arguments": {}},
            {"name": "list_conversations", "arguments": {}},
        ],
    }));
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
    let answer = client(&json!({
        "transport": "http",
        "url": server.url,
        "headers": headers,
        "calls": [{"name": "recall", "arguments": {"query": "vault code"}}],
    }));
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
