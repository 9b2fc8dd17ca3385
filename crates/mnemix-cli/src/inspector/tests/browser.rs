//! The inspector in a real browser: Debian's chromium, driven through chromedriver by
//! fantoccini (WebDriver). A machine without them is a named skip, and a failure when
//! `MNEMIX_TEST_REQUIRE` names `browser` (as CI does). Screenshots of the main pages are left in
//! `target/ui-screenshots/`.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use mnemix_core::{WorkingMemoryKey, WorkingMemoryUpdate};

use super::{World, PLANTED};
use crate::mcp::connections::{self, ConnectionLimits};

/// chromedriver, killed when the test ends.
struct Driver(Child);

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn found(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(program))
            .find(|path| path.is_file())
    })
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A headless chromium session, or `None` (a named skip) on a machine without one.
async fn browser() -> Option<(Driver, Client)> {
    let (Some(chromium), Some(chromedriver)) = (found("chromium"), found("chromedriver")) else {
        assert!(
            !mnemix_conformance::is_required("browser"),
            "MNEMIX_TEST_REQUIRE names browser: install Debian's chromium and chromium-driver"
        );
        eprintln!("SKIP inspector::browser: no chromium and chromedriver on PATH");
        return None;
    };
    let port = free_port();
    let driver = Driver(
        Command::new(chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts"),
    );
    let mut capabilities = serde_json::Map::new();
    capabilities.insert(
        "goog:chromeOptions".into(),
        serde_json::json!({
            "binary": chromium,
            "args": ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                     "--window-size=1280,860", "--disable-gpu"],
        }),
    );
    let address = format!("http://127.0.0.1:{port}");
    for _ in 0..100 {
        let connected = ClientBuilder::new(HttpConnector::new())
            .capabilities(capabilities.clone())
            .connect(&address)
            .await;
        match connected {
            Ok(client) => return Some((driver, client)),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    panic!("chromedriver did not answer on {address}");
}

async fn screenshot(client: &Client, name: &str) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/ui-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    let png = client.screenshot().await.unwrap();
    std::fs::write(dir.join(format!("{name}.png")), png).unwrap();
}

/// Clicks the button `selector` names and waits for the page it loads.
async fn submit(client: &Client, selector: &str) {
    let before = client.find(Locator::Css("html")).await.unwrap();
    client
        .find(Locator::Css(selector))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    for _ in 0..200 {
        if before.tag_name().await.is_err() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{selector} loaded no new page");
}

/// Goes to `url` and returns the page's text.
async fn visit(client: &Client, url: &str) -> String {
    client.goto(url).await.unwrap();
    text_of(client).await
}

async fn text_of(client: &Client) -> String {
    client
        .find(Locator::Css("body"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_browses_explains_edits_and_erases_in_chromium() {
    let Some((_driver, client)) = browser().await else {
        return;
    };
    let world = World::new("memory://", true).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let site = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(connections::serve(
        listener,
        world.router.clone(),
        ConnectionLimits::default(),
        std::future::pending(),
    ));
    let base = format!("{site}{}", world.base("alice"));

    // Log in: the key goes in a form, and the browser keeps only the session cookie.
    client.goto(&format!("{site}/")).await.unwrap();
    assert!(client
        .current_url()
        .await
        .unwrap()
        .path()
        .ends_with("/login"));
    screenshot(&client, "login").await;
    client
        .find(Locator::Css("input[name=key]"))
        .await
        .unwrap()
        .send_keys(&world.alice)
        .await
        .unwrap();
    submit(&client, "form.login button").await;
    assert_eq!(
        client.current_url().await.unwrap().path(),
        world.base("alice"),
        "{}",
        client.source().await.unwrap()
    );
    let cookies = client
        .execute("return document.cookie", vec![])
        .await
        .unwrap();
    assert_eq!(
        cookies, "",
        "the session cookie is HttpOnly: no script reads it"
    );
    screenshot(&client, "subject").await;

    // A conversation: the raw history beside the replay, the unanswered tool call marked.
    let page = visit(
        &client,
        &format!("{base}/conversations/{}", world.alice_thread.as_str()),
    )
    .await;
    assert!(page.contains("removed by sanitizing"), "{page}");
    screenshot(&client, "conversation").await;

    // Recall, explained.
    let page = visit(
        &client,
        &format!(
            "{base}/recall?conversation={}&q=what+is+my+cat+called",
            world.alice_trip.as_str()
        ),
    )
    .await;
    assert!(page.contains("The context"), "{page}");
    assert!(page.contains("My cat is called Miso"), "{page}");
    screenshot(&client, "recall").await;

    // The planted facts are text: no dialog opened, no script changed the title.
    let page = visit(&client, &format!("{base}/facts")).await;
    for planted in PLANTED {
        assert!(page.contains(planted), "{planted} is shown as text");
    }
    assert!(client.get_alert_text().await.is_err(), "no dialog is open");
    assert_eq!(client.title().await.unwrap(), "Facts · mnemix");
    screenshot(&client, "facts").await;

    // A working-memory edit that meets a newer revision shows the conflict, then saves.
    client.goto(&format!("{base}/working")).await.unwrap();
    let store = std::sync::Arc::clone(&world.inspector.store);
    let scope = mnemix_core::Scope::new(world.namespace.clone(), "alice").unwrap();
    store
        .set_working_memory(
            &scope,
            &WorkingMemoryKey::User,
            WorkingMemoryUpdate::markdown("written by the agent meanwhile"),
        )
        .await
        .unwrap();
    let edit = client
        .find(Locator::Css("textarea[name=content]"))
        .await
        .unwrap();
    edit.clear().await.unwrap();
    edit.send_keys("my edit").await.unwrap();
    submit(&client, "main form[method=post] button[type=submit]").await;
    let page = text_of(&client).await;
    assert!(page.contains("Not saved"), "{page}");
    assert!(page.contains("written by the agent meanwhile"), "{page}");
    screenshot(&client, "working-memory-conflict").await;
    submit(&client, "main form[method=post] button[type=submit]").await;
    let saved = store
        .get_working_memory(&scope, &WorkingMemoryKey::User)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(saved.content, "my edit");

    // Erasure: the dry run's counts, then the receipt.
    client.goto(&format!("{base}/erase")).await.unwrap();
    assert!(text_of(&client).await.contains("A dry run"));
    client
        .find(Locator::Css("input[name=confirm]"))
        .await
        .unwrap()
        .send_keys("alice")
        .await
        .unwrap();
    submit(&client, "button.danger").await;
    assert!(text_of(&client).await.contains("Receipt"));

    // Logging out ends the session.
    submit(&client, "header form button").await;
    assert!(client
        .current_url()
        .await
        .unwrap()
        .path()
        .ends_with("/login"));
    client.goto(&base).await.unwrap();
    assert!(client
        .current_url()
        .await
        .unwrap()
        .path()
        .ends_with("/login"));
    client.close().await.unwrap();
}
