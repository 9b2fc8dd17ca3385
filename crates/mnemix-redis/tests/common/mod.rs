//! Key prefixes for test scenarios, and the sweep that keeps a long-lived Redis from filling
//! up with them.

#![allow(dead_code)]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Prefixes older than this belong to runs that have ended (a whole CI run takes minutes).
const STALE_AFTER: Duration = Duration::from_hours(1);

fn now_millis() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_millis()
}

/// `conformance-MILLIS-PID-N`: unique per scenario, and dated so later runs can sweep it.
pub fn scenario_prefix() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "conformance-{}-{}-{}",
        now_millis(),
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Deletes the keys of scenario prefixes older than an hour, once per process. Each run leaves
/// its own keys behind (the suite has no teardown); this bounds what a long-lived server
/// holds without touching a run still going.
pub async fn sweep_stale_prefixes(url: &str) {
    static SWEPT: AtomicBool = AtomicBool::new(false);
    if SWEPT.swap(true, Ordering::SeqCst) {
        return;
    }
    let Ok(client) = redis::Client::open(url) else {
        return;
    };
    let Ok(mut conn) = client.get_multiplexed_async_connection().await else {
        return;
    };
    let cutoff = now_millis().saturating_sub(STALE_AFTER.as_millis());
    let mut cursor: u64 = 0;
    loop {
        let Ok((next, keys)): redis::RedisResult<(u64, Vec<String>)> = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg("conformance-*")
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut conn)
            .await
        else {
            return;
        };
        let stale: Vec<&String> = keys
            .iter()
            .filter(|k| {
                k.split('-')
                    .nth(1)
                    .and_then(|millis| millis.parse::<u128>().ok())
                    .is_some_and(|millis| millis < cutoff)
            })
            .collect();
        if !stale.is_empty() {
            let _: redis::RedisResult<i64> = redis::cmd("UNLINK")
                .arg(&stale)
                .query_async(&mut conn)
                .await;
        }
        if next == 0 {
            return;
        }
        cursor = next;
    }
}
