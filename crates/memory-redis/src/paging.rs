//! Newest-first listings read page by page from a zset scored by `created_at`, so a page costs
//! what it returns (plus what the filters skip), not the whole index.

use memory_core::page::Cursor;
use memory_core::{Result, Timestamp};

use crate::{RedisResultExt, RedisStore};

/// Ids read from the index per round trip.
const CHUNK: usize = 256;

/// Walks a zset (score `created_at`, member id) newest first from after a keyset cursor.
///
/// Equal scores come in reverse byte order of id from `ZREVRANGEBYSCORE`: the listing's tie
/// order, so the items found, cut by `memory_core::page::page_newest_first` without a cursor,
/// page exactly as on every other backend. Each chunk after the first starts at the last score
/// read, past the entries of that score already read; the keyset filter drops any entry read
/// twice because an insert moved it, so inserts during a listing never duplicate an item.
pub(crate) struct IdPager {
    index: String,
    /// The highest score to read from (`None`: `+inf`).
    max: Option<i64>,
    /// Everything returned comes after this (the caller's cursor, then the last id read).
    after: Option<Cursor>,
    offset: usize,
    exhausted: bool,
    /// The page size.
    pub(crate) size: usize,
}

impl IdPager {
    /// Pages of `size` after `after` (a listing's checked paging arguments).
    pub(crate) fn new(index: String, after: Option<Cursor>, size: usize) -> Self {
        let max = after.as_ref().map(|c| c.created_at.as_millis());
        Self {
            index,
            max,
            after,
            offset: 0,
            exhausted: false,
            size,
        }
    }

    /// The next ids after the cursor, or `None` once the index is exhausted or `found` items
    /// already fill the page (one more than its size tells whether another page follows).
    pub(crate) async fn next(
        &mut self,
        store: &RedisStore,
        found: usize,
    ) -> Result<Option<Vec<String>>> {
        if self.exhausted || found > self.size {
            return Ok(None);
        }
        let chunk: Vec<(String, i64)> = redis::cmd("ZREVRANGEBYSCORE")
            .arg(&self.index)
            .arg(
                self.max
                    .map_or_else(|| "+inf".to_owned(), |m| m.to_string()),
            )
            .arg("-inf")
            .arg("WITHSCORES")
            .arg("LIMIT")
            .arg(self.offset)
            .arg(CHUNK)
            .query_async(&mut store.conn())
            .await
            .db()?;
        self.exhausted = chunk.len() < CHUNK;
        // Next time: from the last score read, past every entry of that score read so far
        // (entries come in order, so those of the last score end the chunk).
        if let Some(&(_, last)) = chunk.last() {
            let same = chunk.iter().rev().take_while(|(_, c)| *c == last).count();
            self.offset = if self.max == Some(last) {
                self.offset + same
            } else {
                same
            };
            self.max = Some(last);
        }
        let fresh: Vec<(String, i64)> = chunk
            .into_iter()
            .filter(|(id, created)| {
                self.after
                    .as_ref()
                    .is_none_or(|c| c.precedes(Timestamp::from_millis(*created), id))
            })
            .collect();
        if let Some((id, created)) = fresh.last() {
            self.after = Some(Cursor {
                created_at: Timestamp::from_millis(*created),
                id: id.clone(),
            });
        }
        Ok(Some(fresh.into_iter().map(|(id, _)| id).collect()))
    }
}
