//! testcontainers starts `scripts/images.sh`'s PostgreSQL and Redis images for real, and a
//! store on each keeps what it is given. It needs the URL variables unset (else a named skip:
//! `cargo xtask test --compose` runs it apart, unset, with `MNEMIX_TEST_REQUIRE=containers`).

use mnemix::{AppendOptions, LoadOptions, Message, NewConversation, Scope};
use mnemix_conformance::SetupError;
use mnemix_testkit::services::{locate, Service};

async fn round_trip(service: Service, name: &str) {
    let tests = format!("containers: {name}");
    if std::env::var_os(service.env_var()).is_some() {
        let why = format!(
            "{} is set: this test is about the container",
            service.env_var()
        );
        mnemix_conformance::skip("containers", &tests, &why);
        return;
    }
    // testcontainers' blocking runner has a runtime of its own: start it off this one.
    let located = tokio::task::spawn_blocking(move || locate(service))
        .await
        .expect("the start task");
    let url = match located {
        Ok(url) => url,
        Err(SetupError::Unreachable(why)) => {
            mnemix_conformance::skip("containers", &tests, &why);
            return;
        }
        Err(SetupError::Failed(e)) => panic!("{name}: {e}"),
    };
    let store = mnemix::open(&url).await.expect("the store opens");
    let scope = Scope::new("containers", "ada").expect("a scope");
    let thread = store
        .create_conversation(&scope, NewConversation::default())
        .await
        .expect("a conversation");
    store
        .append(
            &scope,
            &thread.id,
            vec![Message::user("hello from a container test")],
            AppendOptions::default(),
        )
        .await
        .expect("an append");
    let loaded = store
        .load(&scope, &thread.id, LoadOptions::raw())
        .await
        .expect("a load");
    assert_eq!(loaded.len(), 1);
    assert_eq!(loaded[0].message.text(), "hello from a container test");
}

#[tokio::test]
async fn a_postgres_container_keeps_what_it_is_given() {
    round_trip(Service::Postgres, "postgres").await;
}

#[tokio::test]
async fn a_redis_container_keeps_what_it_is_given() {
    round_trip(Service::Redis, "redis").await;
}
