//! Keyset pagination shared by the list operations.

use serde::{Deserialize, Serialize};

use crate::error::{MemoryError, Result};
use crate::time::Timestamp;

/// One page of a listing and the cursor to the next.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Page<T> {
    /// The items, in the listing's order.
    pub items: Vec<T>,
    /// Pass to the next call to continue; `None` when this page is the last.
    pub next_cursor: Option<String>,
}

/// Default page size when a listing gives none.
pub const DEFAULT_PAGE_SIZE: usize = 50;
/// Largest page a listing returns.
pub const MAX_PAGE_SIZE: usize = 1000;

/// The position after which a newest-first listing continues: `(created_at, id)` of the last item.
///
/// Listings order by `created_at` descending then id descending, so items inserted while a caller
/// pages (which are newer) never shift later pages: the cursor is stable under concurrent inserts.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Cursor {
    /// `created_at` of the last item returned.
    pub created_at: Timestamp,
    /// Id of the last item returned.
    pub id: String,
}

impl Cursor {
    /// Encodes as the opaque string handed to callers.
    pub fn encode(&self) -> String {
        format!("{}:{}", self.created_at.as_millis(), self.id)
    }

    /// Decodes a string made by [`Cursor::encode`]; anything else is `InvalidInput`.
    pub fn decode(text: &str) -> Result<Self> {
        let bad = || MemoryError::invalid(format!("malformed cursor {text:?}"));
        let (millis, id) = text.split_once(':').ok_or_else(bad)?;
        let millis: i64 = millis.parse().map_err(|_| bad())?;
        // The id of a listed record: an identifier (non-empty, no NUL, at most 256 bytes).
        if crate::scope::validate_identifier("cursor", id).is_err() {
            return Err(bad());
        }
        Ok(Self {
            created_at: Timestamp::from_millis(millis),
            id: id.to_owned(),
        })
    }

    /// Whether an item at `(created_at, id)` comes after this cursor in newest-first order.
    pub fn precedes(&self, created_at: Timestamp, id: &str) -> bool {
        (created_at, id) < (self.created_at, self.id.as_str())
    }
}

/// Checks a listing's paging arguments: a limit in `1..=1000` (or none) and a cursor made by
/// [`Cursor::encode`] (or none). The front layer calls it; backends then read the arguments with
/// [`page_limit`] and the query's `after()`, which cannot fail.
pub fn check_page(limit: Option<usize>, cursor: Option<&str>) -> Result<()> {
    match limit {
        Some(0) => return Err(MemoryError::invalid("page limit must be at least 1")),
        Some(n) if n > MAX_PAGE_SIZE => {
            return Err(MemoryError::invalid(format!(
                "page limit {n} exceeds {MAX_PAGE_SIZE}"
            )))
        }
        _ => {}
    }
    cursor.map(Cursor::decode).transpose().map(drop)
}

/// The page size of a checked limit: the default when none was given.
pub fn page_limit(limit: Option<usize>) -> usize {
    limit.unwrap_or(DEFAULT_PAGE_SIZE).clamp(1, MAX_PAGE_SIZE)
}

/// The position a checked cursor continues after; `None` for the first page.
pub fn page_after(cursor: Option<&str>) -> Option<Cursor> {
    cursor.and_then(|text| Cursor::decode(text).ok())
}

/// Pages items already sorted newest first (`created_at` desc, id desc): at most `limit` of
/// them after `after`, and the cursor to the next page.
///
/// Shared by backends that list in memory so every backend pages identically.
pub fn page_newest_first<T>(
    items: impl IntoIterator<Item = T>,
    key: impl Fn(&T) -> (Timestamp, &str),
    after: Option<&Cursor>,
    limit: usize,
) -> Page<T> {
    let mut items: Vec<T> = items
        .into_iter()
        .filter(|item| {
            let (created_at, id) = key(item);
            after.is_none_or(|c| c.precedes(created_at, id))
        })
        .take(limit + 1)
        .collect();
    let next_cursor = if items.len() > limit {
        items.truncate(limit);
        items.last().map(|last| {
            let (created_at, id) = key(last);
            Cursor {
                created_at,
                id: id.to_owned(),
            }
            .encode()
        })
    } else {
        None
    };
    Page { items, next_cursor }
}
