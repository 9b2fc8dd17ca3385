//! W11: `mnemix ui`'s pages on SQLite, each timed on the server (through its router, no
//! network) against the store reads it makes, called directly; and "recall, explained"
//! against the plain `prepare` of the same turn.

use std::future::Future;
use std::sync::Arc;

use axum::body::{to_bytes, Body};
use axum::http::{header, Request, StatusCode};
use axum::Router;
use mnemix_bench::workloads::{nth, run_clients, FnSide, Sizes};
use mnemix_bench::{compare, Side, Table};
use mnemix_cli::inspector::{default_memory_config, router, Inspector, Settings};
use mnemix_core::embed::HashingEmbedder;
use mnemix_core::{
    AppendOptions, ConversationId, ConversationQuery, FactQuery, LoadOptions, MemoryBackend,
    Message, NewConversation, NewFact, RecallQuery, RememberOptions, Scope, WorkingMemoryKey,
    WorkingMemoryUpdate,
};
use mnemix_engine::{Memories, Memory};
use tower::ServiceExt as _;

/// The inspected subject, in a namespace of its own: the other workloads' collections in
/// `bench` were made by embedders of other widths.
fn inspected() -> Scope {
    Scope::new("inspector", "inspected").expect("valid scope")
}

/// Fills the inspected subject: `facts` facts (every tenth a version of one of 100 keys), as
/// many conversations as `conversations` of four messages, its working memory, and one thread
/// of 200 messages committed through the engine (embedded, for recall).
async fn fill(
    store: &Arc<dyn MemoryBackend>,
    memory: &Memory,
    sentences: &[String],
    facts: usize,
    conversations: usize,
) -> ConversationId {
    let scope = inspected();
    for i in 0..facts {
        let mut fact = NewFact::new(nth(sentences, i)).with_tags([format!("t{}", i % 7)]);
        if i % 10 == 0 {
            fact = fact.with_key(format!("key-{}", i / 10 % 100));
        }
        store
            .remember(&scope, fact, RememberOptions::default())
            .await
            .expect("remember");
    }
    for i in 0..conversations {
        let id = store
            .create_conversation(
                &scope,
                NewConversation::default().with_title(format!("c{i}")),
            )
            .await
            .expect("create")
            .id;
        let messages = (0..4)
            .map(|j| {
                let text = nth(sentences, 4 * i + j);
                if j % 2 == 0 {
                    Message::user(text)
                } else {
                    Message::assistant(text)
                }
            })
            .collect();
        store
            .append(&scope, &id, messages, AppendOptions::default())
            .await
            .expect("append");
    }
    store
        .set_working_memory(
            &scope,
            &WorkingMemoryKey::User,
            WorkingMemoryUpdate::markdown("# inspected\n- prefers the window seat"),
        )
        .await
        .expect("working memory");
    let (thread, _) = memory
        .auto_conversation(&scope, "inspected", 0)
        .await
        .expect("thread");
    for round in 0..10 {
        let turns = (0..20)
            .map(|j| {
                let text = nth(sentences, 7_000 + 20 * round + j);
                if j % 2 == 0 {
                    Message::user(text)
                } else {
                    Message::assistant(text)
                }
            })
            .collect();
        memory
            .commit(&scope, &thread.id, turns)
            .await
            .expect("commit");
    }
    thread.id
}

/// Words and spaces only: text that goes into a URL's query as it is.
fn plain(text: &str) -> String {
    text.chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ')
        .collect()
}

/// `requests` GETs of `path` per round through the router, each timed until its body is read.
fn page_side(app: &Router, path: String, requests: usize) -> impl Side {
    let (app, path) = (app.clone(), Arc::new(path));
    FnSide::new("page (server time)", move || {
        let (app, path) = (app.clone(), Arc::clone(&path));
        run_clients(1, (0..requests).collect(), move |_: usize| {
            let (app, path) = (app.clone(), Arc::clone(&path));
            async move {
                let request = Request::get(path.as_str())
                    .header(header::HOST, "localhost")
                    .body(Body::empty())
                    .expect("a request");
                let response = app.oneshot(request).await.expect("an answer");
                assert_eq!(response.status(), StatusCode::OK, "{path}");
                std::hint::black_box(to_bytes(response.into_body(), usize::MAX).await.unwrap());
            }
        })
    })
}

/// One page's table: its server time against its reads, `requests` of each per round.
async fn page_table<R, F>(
    (title, config): (&str, &str),
    sizes: &Sizes,
    app: &Router,
    path: String,
    reads: R,
) -> Table
where
    R: Fn() -> F + Clone + Send + Sync + 'static,
    F: Future<Output = ()> + Send + 'static,
{
    let requests = sizes.page_requests;
    let mut page = page_side(app, path, requests);
    let mut direct = FnSide::new("its reads", || {
        run_clients(1, (0..requests).collect(), {
            let reads = reads.clone();
            move |_: usize| reads()
        })
    });
    compare(
        format!("W11 inspector page: {title}"),
        format!(
            "{config}; {requests} requests per round, {} rounds",
            sizes.rounds
        ),
        sizes.rounds,
        1,
        &mut [&mut page, &mut direct],
    )
    .await
}

/// W11 on `store` (SQLite).
// rustfmt keeps the braces of the reads' blocks, passed to `page!` as expressions.
#[allow(unused_braces)]
pub async fn pages(
    sizes: &Sizes,
    store: &Arc<dyn MemoryBackend>,
    sentences: &[String],
) -> Vec<Table> {
    let (facts, conversations) = sizes.inspected;
    let config_of_memory = default_memory_config();
    let memory = Arc::new(
        Memory::builder(Arc::clone(store))
            .config(config_of_memory.clone())
            .embedder(Arc::new(HashingEmbedder::default()))
            .build()
            .expect("memory"),
    );
    let thread = fill(store, &memory, sentences, facts, conversations).await;
    let inspector =
        Inspector::new(Arc::clone(store), Settings::new(config_of_memory)).expect("an inspector");
    let app = router(Arc::new(inspector));
    let scope = inspected();
    let base = "/s/inspector/inspected";
    let config = format!(
        "sqlite; a subject with {facts} facts and {conversations} conversations of 4 messages"
    );
    let one = conversations / 2;
    let listed = store
        .list_conversations(&scope, ConversationQuery::default().with_limit(1000))
        .await
        .expect("list");
    let shown = listed.items[one % listed.items.len()].id.clone();
    let question = plain(nth(sentences, 7_013));

    let mut tables = Vec::new();
    // Each page's reads, written as the page makes them; `$held` is cloned into every call.
    macro_rules! page {
        ($title:expr, $path:expr, |$s:ident, $sc:ident $(, $held:ident)?| $reads:expr) => {{
            let (s, sc) = (Arc::clone(store), scope.clone());
            tables.push(
                page_table(($title, &config), sizes, &app, $path, move || {
                    let ($s, $sc) = (Arc::clone(&s), sc.clone());
                    $(let $held = $held.clone();)?
                    async move {
                        std::hint::black_box($reads);
                    }
                })
                .await,
            );
        }};
    }
    page!("a subject's overview", base.to_owned(), |s, sc| {
        let c = s.list_conversations(&sc, ConversationQuery::default().with_limit(1000));
        let f = s.list_facts(&sc, FactQuery::default().with_limit(1000));
        let w = s.get_working_memory(&sc, &WorkingMemoryKey::User);
        let g = Memories::new(Arc::clone(&s));
        (
            c.await.unwrap(),
            f.await.unwrap(),
            w.await.unwrap(),
            g.grants(sc.namespace()).await.unwrap(),
        )
    });
    page!(
        "conversations, first page of 50",
        format!("{base}/conversations"),
        |s, sc| {
            s.list_conversations(&sc, ConversationQuery::default().with_limit(50))
                .await
                .unwrap()
        }
    );
    let id = shown.clone();
    page!(
        "a conversation, raw beside its replay",
        format!("{base}/conversations/{}", shown.as_str()),
        |s, sc, id| {
            (
                s.get_conversation(&sc, &id).await.unwrap(),
                s.load(&sc, &id, LoadOptions::raw().with_last(100))
                    .await
                    .unwrap(),
                s.load(&sc, &id, LoadOptions::last(100)).await.unwrap(),
            )
        }
    );
    page!(
        "facts, first page of 50",
        format!("{base}/facts"),
        |s, sc| {
            s.list_facts(&sc, FactQuery::default().with_limit(50))
                .await
                .unwrap()
        }
    );
    let words: String = plain(nth(sentences, 17))
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ");
    page!(
        "facts searched by words, 50",
        format!("{base}/facts?q={}", words.replace(' ', "+")),
        |s, sc, words| {
            s.recall(&sc, RecallQuery::text(words).with_limit(50))
                .await
                .unwrap()
        }
    );
    page!(
        "a key's history",
        format!("{base}/facts/history?key=key-7"),
        |s, sc| { s.history(&sc, "key-7").await.unwrap() }
    );
    page!("working memory", format!("{base}/working"), |s, sc| {
        s.get_working_memory(&sc, &WorkingMemoryKey::User)
            .await
            .unwrap()
    });
    page!(
        "vectors and checkpoints",
        format!("{base}/stores"),
        |s, sc| {
            (
                s.list_collections(sc.namespace()).await.unwrap(),
                s.list_suspended(&sc, None).await.unwrap(),
            )
        }
    );
    page!("erasure dry run", format!("{base}/erase"), |s, sc| {
        s.count_owned(&sc).await.unwrap()
    });

    // Recall, explained: the page, `explain` and the plain `prepare`, against `prepare`.
    let requests = sizes.page_requests;
    let path = format!(
        "{base}/recall?conversation={}&q={}",
        thread.as_str(),
        question.split_whitespace().collect::<Vec<_>>().join("+")
    );
    let question = Arc::new(question);
    let side = |name: &'static str, explain: bool| {
        let (memory, scope, thread, question) = (
            Arc::clone(&memory),
            scope.clone(),
            thread.clone(),
            Arc::clone(&question),
        );
        FnSide::new(name, move || {
            let (memory, scope, thread, question) = (
                Arc::clone(&memory),
                scope.clone(),
                thread.clone(),
                Arc::clone(&question),
            );
            run_clients(1, (0..requests).collect(), move |_: usize| {
                let (memory, scope, thread, question) = (
                    Arc::clone(&memory),
                    scope.clone(),
                    thread.clone(),
                    Arc::clone(&question),
                );
                async move {
                    if explain {
                        std::hint::black_box(
                            memory.explain(&scope, &thread, &question).await.unwrap(),
                        );
                    } else {
                        std::hint::black_box(
                            memory.prepare(&scope, &thread, &question).await.unwrap(),
                        );
                    }
                }
            })
        })
    };
    let mut page = page_side(&app, path, requests);
    let mut explain = side("Memory::explain", true);
    let mut prepare = side("Memory::prepare", false);
    tables.push(
        compare(
            "W11 inspector page: recall, explained, against the plain prepare",
            format!(
                "{config}; a thread of 200 messages committed through the engine (hashing embedder), the default inspector configuration (window, semantic recall, facts); {requests} requests per round, {} rounds",
                sizes.rounds
            ),
            sizes.rounds,
            2,
            &mut [&mut page, &mut explain, &mut prepare],
        )
        .await,
    );
    tables
}
