//! Scenarios of [`CacheStore`](mnemix_core::CacheStore).

use std::time::Duration;

use crate::support::ResultExt;
use crate::Ctx;

/// Arbitrary bytes round-trip exactly.
pub async fn set_then_get_round_trips_bytes(ctx: &Ctx) {
    let value: Vec<u8> = (0..=255u8).chain([0, 0, 255]).collect();
    ctx.backend()
        .cache_set(ctx.namespace(), "embedding:abc", value.clone(), None)
        .await
        .must("set");
    assert_eq!(
        ctx.backend()
            .cache_get(ctx.namespace(), "embedding:abc")
            .await
            .must("get"),
        Some(value)
    );
    assert_eq!(
        ctx.backend()
            .cache_get(ctx.namespace(), "missing")
            .await
            .must("missing"),
        None
    );
    ctx.backend()
        .cache_set(ctx.namespace(), "empty", Vec::new(), None)
        .await
        .must("set empty");
    assert_eq!(
        ctx.backend()
            .cache_get(ctx.namespace(), "empty")
            .await
            .must("get empty"),
        Some(Vec::new())
    );
}

/// A set replaces the value and its TTL.
pub async fn set_replaces_value_and_ttl(ctx: &Ctx) {
    let b = ctx.backend();
    b.cache_set(
        ctx.namespace(),
        "k",
        b"one".to_vec(),
        Some(Duration::from_secs(10)),
    )
    .await
    .must("set");
    b.cache_set(ctx.namespace(), "k", b"two".to_vec(), None)
        .await
        .must("replace");
    ctx.clock().advance(Duration::from_secs(11));
    assert_eq!(
        b.cache_get(ctx.namespace(), "k").await.must("get"),
        Some(b"two".to_vec()),
        "TTL cleared"
    );
}

/// Entries expire by the store clock at `now + ttl`.
pub async fn ttl_expires_by_store_clock(ctx: &Ctx) {
    let b = ctx.backend();
    b.cache_set(
        ctx.namespace(),
        "k",
        b"v".to_vec(),
        Some(Duration::from_secs(30)),
    )
    .await
    .must("set");
    ctx.clock().advance(Duration::from_secs(29));
    assert!(b
        .cache_get(ctx.namespace(), "k")
        .await
        .must("before")
        .is_some());
    ctx.clock().advance(Duration::from_secs(1));
    assert_eq!(b.cache_get(ctx.namespace(), "k").await.must("after"), None);
    assert!(
        !b.cache_delete(ctx.namespace(), "k")
            .await
            .must("delete expired"),
        "expired is not there"
    );
}

/// Delete reports whether a live entry existed.
pub async fn delete_reports_whether_it_existed(ctx: &Ctx) {
    let b = ctx.backend();
    b.cache_set(ctx.namespace(), "k", b"v".to_vec(), None)
        .await
        .must("set");
    assert!(b.cache_delete(ctx.namespace(), "k").await.must("delete"));
    assert!(!b
        .cache_delete(ctx.namespace(), "k")
        .await
        .must("delete again"));
    assert_eq!(b.cache_get(ctx.namespace(), "k").await.must("get"), None);
}

/// Namespaces do not share entries.
pub async fn namespaces_do_not_share_entries(ctx: &Ctx) {
    let other = ctx.foreign_namespace_scope();
    let b = ctx.backend();
    b.cache_set(ctx.namespace(), "k", b"mine".to_vec(), None)
        .await
        .must("set");
    assert_eq!(
        b.cache_get(other.namespace(), "k").await.must("other ns"),
        None
    );
    assert!(!b
        .cache_delete(other.namespace(), "k")
        .await
        .must("delete other ns"));
    assert!(b
        .cache_get(ctx.namespace(), "k")
        .await
        .must("still mine")
        .is_some());
}

/// Keys follow identifier rules: empty or NUL keys are `InvalidInput`.
pub async fn invalid_keys_are_rejected(ctx: &Ctx) {
    let b = ctx.backend();
    b.cache_set(ctx.namespace(), "", b"v".to_vec(), None)
        .await
        .must_be_invalid("empty key");
    b.cache_set(ctx.namespace(), "a\0b", b"v".to_vec(), None)
        .await
        .must_be_invalid("NUL key");
    b.cache_get(ctx.namespace(), &"k".repeat(300))
        .await
        .must_be_invalid("long key");
}

/// `cache_get_many` answers each key as `cache_get` would, in order (a key asked twice is
/// answered twice); `cache_set_many` writes each entry as `cache_set` would, the later value of
/// a repeated key winning; both take at most `MAX_CACHE_BATCH` keys, and a bad key writes nothing.
pub async fn batches_read_and_write_like_single_calls(ctx: &Ctx) {
    let b = ctx.backend();
    let ns = ctx.namespace();
    let other = ctx.foreign_namespace_scope();
    let every_byte: Vec<u8> = (0..=255u8).collect();
    let entries = vec![
        ("a".to_owned(), b"first".to_vec()),
        ("b".to_owned(), Vec::new()),
        ("c".to_owned(), every_byte.clone()),
        ("a".to_owned(), b"second".to_vec()),
    ];
    b.cache_set_many(ns, entries, Some(Duration::from_secs(30)))
        .await
        .must("set many");
    b.cache_set(ns, "d", b"kept".to_vec(), None)
        .await
        .must("set d");
    b.cache_set(other.namespace(), "b", b"theirs".to_vec(), None)
        .await
        .must("set in another namespace");
    let keys: Vec<String> = ["a", "b", "missing", "c", "a", "d"]
        .map(str::to_owned)
        .to_vec();
    let got = b.cache_get_many(ns, &keys).await.must("get many");
    assert_eq!(
        got,
        [
            Some(b"second".to_vec()),
            Some(Vec::new()),
            None,
            Some(every_byte),
            Some(b"second".to_vec()),
            Some(b"kept".to_vec()),
        ]
    );
    for (key, one) in keys.iter().zip(&got) {
        assert_eq!(&b.cache_get(ns, key).await.must("get"), one, "{key}");
    }
    assert!(b.cache_get_many(ns, &[]).await.must("no keys").is_empty());

    ctx.clock().advance(Duration::from_secs(30));
    let expired = b.cache_get_many(ns, &keys).await.must("after the TTL");
    assert_eq!(
        expired,
        [None, None, None, None, None, Some(b"kept".to_vec())]
    );

    let bad = vec![
        ("x".to_owned(), b"v".to_vec()),
        (String::new(), b"v".to_vec()),
    ];
    b.cache_set_many(ns, bad, None)
        .await
        .must_be_invalid("an empty key");
    assert_eq!(
        b.cache_get(ns, "x").await.must("get x"),
        None,
        "nothing written"
    );
    b.cache_get_many(ns, &["k".to_owned(), "a\0b".to_owned()])
        .await
        .must_be_invalid("a NUL key");
    let limit = mnemix_core::limits::MAX_CACHE_BATCH;
    let many: Vec<String> = (0..=limit).map(|i| format!("k{i}")).collect();
    assert_eq!(
        b.cache_get_many(ns, &many[..limit])
            .await
            .must("at the limit")
            .len(),
        limit
    );
    b.cache_get_many(ns, &many)
        .await
        .must_be_invalid("one key past the limit");
    let too_many = many.into_iter().map(|k| (k, Vec::new())).collect();
    b.cache_set_many(ns, too_many, None)
        .await
        .must_be_invalid("one entry past the limit");
}
