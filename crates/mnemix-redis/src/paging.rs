//! Newest-first listings read page by page from a zset scored by `created_at`, so a page costs
//! what it returns (plus what the filters skip), not the whole index.

use std::collections::VecDeque;

use mnemix_core::adapter::Cursor;
use mnemix_core::{Result, Timestamp};

use crate::{RedisResultExt, RedisStore};

/// Ids read per round trip once the first hand-out fell short of the page (a filter dropped
/// items): from then on a listing reads and hands out in chunks, as a filtered one must.
const CHUNK: usize = 256;

/// Walks a zset (score `created_at`, member id) newest first from after a keyset cursor.
///
/// Equal scores come in reverse byte order of id from `ZREVRANGEBYSCORE`: the listing's tie
/// order, so the items found, cut by `mnemix_core::adapter::page_newest_first` without a cursor,
/// page exactly as on every other backend. Each read after the first starts at the last score
/// read, past the entries of that score already read; the keyset filter drops any entry read
/// twice because an insert moved it, so inserts during a listing never duplicate an item.
///
/// The first ids are read twice as many as the page needs (the cursor's own entry and its ties
/// come again, and filters drop items) but handed out only as many as it needs, so a page
/// without filters reads the documents of its own items and no more. If the caller comes back
/// for more, a filter dropped some: from then on reads take [`CHUNK`] ids and hand out all.
pub(crate) struct IdPager {
    index: String,
    /// The highest score to read from (`None`: `+inf`).
    max: Option<i64>,
    /// Everything read comes after this (the caller's cursor, then the last id read).
    after: Option<Cursor>,
    offset: usize,
    exhausted: bool,
    /// Ids read but not yet handed out, newest first.
    read: VecDeque<String>,
    /// Whether ids were handed out already (so the caller's filters dropped some).
    handed_before: bool,
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
            read: VecDeque::new(),
            handed_before: false,
            size,
        }
    }

    /// The next ids after the cursor (the first time, at most as many as the page needs), or
    /// `None` once the index is exhausted or `found` items already fill the page (one more
    /// than its size tells whether another page follows).
    pub(crate) async fn next(
        &mut self,
        store: &RedisStore,
        found: usize,
    ) -> Result<Option<Vec<String>>> {
        if found > self.size {
            return Ok(None);
        }
        let needed = self.size + 1 - found;
        let count = if self.handed_before {
            needed.saturating_mul(2).max(CHUNK)
        } else {
            needed.saturating_mul(2)
        };
        while self.read.is_empty() {
            if self.exhausted {
                return Ok(None);
            }
            self.read_more(store, count).await?;
        }
        let handed = if self.handed_before {
            self.read.len()
        } else {
            needed.min(self.read.len())
        };
        self.handed_before = true;
        Ok(Some(self.read.drain(..handed).collect()))
    }

    /// Reads up to `count` entries from the index into `read`, dropping those read before.
    async fn read_more(&mut self, store: &RedisStore, count: usize) -> Result<()> {
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
            .arg(count)
            .query_async(&mut store.conn())
            .await
            .db()?;
        self.exhausted = chunk.len() < count;
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
        for (id, created) in chunk {
            let created = Timestamp::from_millis(created);
            if self.after.as_ref().is_none_or(|c| c.precedes(created, &id)) {
                self.read.push_back(id.clone());
                self.after = Some(Cursor {
                    created_at: created,
                    id,
                });
            }
        }
        Ok(())
    }
}
