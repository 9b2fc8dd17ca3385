//! A standalone connection that is replaced once the server goes silent.
//!
//! redis-rs's [`ConnectionManager`] reconnects when its socket fails, but an answer that never
//! comes (a server host gone without a reset, a half-open connection) fails the command with a
//! timeout and leaves the socket in place: every later command would wait on it and time out
//! too. So after a timeout the connection is replaced by a new manager made from the same
//! client, and the commands after it go there.

use std::sync::{Arc, Mutex, PoisonError};

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};

/// A standalone server's connection: clones share one multiplexed socket.
#[derive(Clone)]
pub struct Standalone {
    shared: Arc<Shared>,
}

struct Shared {
    /// The manager in use, and how many times it was replaced.
    current: Mutex<(u64, ConnectionManager)>,
    /// What a replacement is made from; `None` for a manager given by the caller.
    source: Option<(redis::Client, ConnectionManagerConfig)>,
}

impl Standalone {
    /// Connects to `client`'s server.
    pub(crate) async fn connect(
        client: redis::Client,
        config: ConnectionManagerConfig,
    ) -> RedisResult<Self> {
        let manager = ConnectionManager::new_with_config(client.clone(), config.clone()).await?;
        Ok(Self::with(manager, Some((client, config))))
    }

    fn with(
        manager: ConnectionManager,
        source: Option<(redis::Client, ConnectionManagerConfig)>,
    ) -> Self {
        Self {
            shared: Arc::new(Shared {
                current: Mutex::new((0, manager)),
                source,
            }),
        }
    }

    fn current(&self) -> (u64, ConnectionManager) {
        self.shared
            .current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// After `result` of a command sent on replacement `generation`: a timeout replaces that
    /// manager (unless another command did already). A replacement that cannot connect leaves
    /// things as they were, for the next timeout to try again.
    async fn after<T>(&self, generation: u64, result: RedisResult<T>) -> RedisResult<T> {
        if let (Err(e), Some((client, config))) = (&result, &self.shared.source) {
            if e.is_timeout() {
                if let Ok(fresh) =
                    ConnectionManager::new_with_config(client.clone(), config.clone()).await
                {
                    let mut current = self
                        .shared
                        .current
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner);
                    if current.0 == generation {
                        *current = (generation + 1, fresh);
                    }
                }
            }
        }
        result
    }
}

impl From<ConnectionManager> for Standalone {
    /// A manager of the caller's: used as it is, never replaced.
    fn from(manager: ConnectionManager) -> Self {
        Self::with(manager, None)
    }
}

impl ConnectionLike for Standalone {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let (generation, mut manager) = self.current();
            let result = manager.req_packed_command(cmd).await;
            self.after(generation, result).await
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let (generation, mut manager) = self.current();
            let result = manager.req_packed_commands(pipeline, offset, count).await;
            self.after(generation, result).await
        })
    }

    fn get_db(&self) -> i64 {
        self.current().1.get_db()
    }
}
