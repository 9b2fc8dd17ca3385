//! Answers given once replicas hold what they tell: `WAIT` after every command on the store's
//! keys, sent where the command went (the same standalone connection; on a cluster, the master
//! of the key's slot).
//!
//! Redis replicates asynchronously: a master killed right after it answered a write can take
//! the write with it, and the replica promoted in its place never saw it. With
//! [`RedisStoreBuilder::replicas`](crate::RedisStoreBuilder::replicas) at `n`, the store answers
//! a write only once `n` replicas have acknowledged it, so a failover keeps every acknowledged
//! write. Reads wait too: a read may see a write the master holds and no replica yet has, and
//! a failover would then take back what the read showed; after `WAIT` it is replicated. A call
//! not replicated in time fails `Unavailable`: a write may have been applied, like any write
//! whose answer was lost, and the retry of an idempotent write (an append, by message id) is
//! safe.

use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{Arg, Cmd, Pipeline, RedisError, RedisFuture, RedisResult, Value};

use crate::RedisConnection;

/// Commands that name no key of the store's data: no `WAIT` after them.
const KEYLESS: &[&[u8]] = &[
    b"CLUSTER", b"CONFIG", b"DBSIZE", b"INFO", b"KEYS", b"PING", b"SCAN", b"SCRIPT", b"WAIT",
];

/// The store's connection, waiting for `replicas` replicas after each command (none: as is).
#[derive(Clone)]
pub(crate) struct Acknowledged {
    pub(crate) inner: RedisConnection,
    pub(crate) replicas: u32,
    pub(crate) wait: Duration,
}

/// The command's arguments, its name upper-cased first.
fn args(cmd: &Cmd) -> Vec<&[u8]> {
    cmd.args_iter()
        .filter_map(|arg| match arg {
            Arg::Simple(bytes) => Some(bytes),
            _ => None,
        })
        .collect()
}

/// The key a command reads or writes (its first), or `None` for one that names none.
pub(crate) fn touched_key(cmd: &Cmd) -> Option<Vec<u8>> {
    let args = args(cmd);
    let name = args.first()?.to_ascii_uppercase();
    if KEYLESS.contains(&name.as_slice()) {
        return None;
    }
    // EVALSHA sha numkeys key…; every other command names its key first.
    let key = match name.as_slice() {
        b"EVAL" | b"EVALSHA" => args.get(3),
        _ => args.get(1),
    };
    Some(key.map(|k| k.to_vec()).unwrap_or_default())
}

impl Acknowledged {
    /// Waits until `replicas` replicas acknowledged everything `key`'s master had done when
    /// the command before ran (what it wrote, and what it read).
    async fn wait_for(&mut self, key: &[u8]) -> RedisResult<()> {
        let mut wait = redis::cmd("WAIT");
        wait.arg(self.replicas)
            .arg(u64::try_from(self.wait.as_millis()).unwrap_or(u64::MAX));
        let acknowledged = self.inner.send_to_master_of(key, &wait).await?;
        let acknowledged: u32 = redis::from_redis_value(acknowledged)?;
        if acknowledged < self.replicas {
            return Err(RedisError::from((
                redis::ErrorKind::Io,
                "a write was not replicated in time",
                format!(
                    "{acknowledged} of {} replicas acknowledged it within {:?}",
                    self.replicas, self.wait
                ),
            )));
        }
        Ok(())
    }
}

impl ConnectionLike for Acknowledged {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let value = self.inner.req_packed_command(cmd).await?;
            if self.replicas > 0 {
                if let Some(key) = touched_key(cmd) {
                    self.wait_for(&key).await?;
                }
            }
            Ok(value)
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let values = self
                .inner
                .req_packed_commands(pipeline, offset, count)
                .await?;
            if self.replicas > 0 {
                // A pipeline the store sends stays in one slot: its first key names it.
                if let Some(key) = pipeline.cmd_iter().find_map(touched_key) {
                    self.wait_for(&key).await?;
                }
            }
            Ok(values)
        })
    }

    fn get_db(&self) -> i64 {
        self.inner.get_db()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_command_waits_on_its_key() {
        let set = redis::cmd("HSET").arg("p:{a}:x").arg("f").arg("v").clone();
        assert_eq!(touched_key(&set), Some(b"p:{a}:x".to_vec()));
        let script = redis::cmd("EVALSHA")
            .arg("abc")
            .arg(2)
            .arg("p:{b}:k")
            .arg("p:{b}:l")
            .clone();
        assert_eq!(touched_key(&script), Some(b"p:{b}:k".to_vec()));
        let read = redis::cmd("hmget").arg("p:{a}:x").arg("f").clone();
        assert_eq!(touched_key(&read), Some(b"p:{a}:x".to_vec()));
        assert_eq!(
            touched_key(&redis::cmd("WAIT").arg(1).arg(10).clone()),
            None
        );
        assert_eq!(touched_key(&redis::cmd("SCRIPT").arg("LOAD").clone()), None);
    }
}
