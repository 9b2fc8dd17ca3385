//! Conversations: their rows, message trims and cursors, and the appends of a write group.

use std::collections::HashMap;

use mnemix_core::adapter::{plan_append, AppendPlan};
use mnemix_core::{
    AppendOptions, AppendReceipt, ConversationId, MemoryError, Message, MessageId, NewChange,
    Operation, Principal, Result, Scope, StoredMessage, Timestamp,
};

/// The columns of a conversation, in the order the backends decode them.
#[macro_export]
macro_rules! conversation_columns {
    () => {
        "pk, id, agent, title, metadata, resource_slug, record_id, created_at, updated_at, last_seq"
    };
}

/// A conversation by id: `?1` namespace, `?2` subject, `?3` id.
pub const BY_ID: &str = concat!(
    "SELECT ",
    conversation_columns!(),
    " FROM conversations WHERE namespace = ?1 AND subject = ?2 AND id = ?3"
);

/// A subject's conversations (its export): `?1` namespace, `?2` subject.
pub const OF_SCOPE: &str = concat!(
    "SELECT ",
    conversation_columns!(),
    " FROM conversations WHERE namespace = ?1 AND subject = ?2"
);

/// A page of a subject's conversations, newest first, whose position is `after`.
macro_rules! list_page {
    ($after:literal) => {
        concat!(
            "SELECT ",
            conversation_columns!(),
            " FROM conversations WHERE namespace = ?1 AND subject = ?2
              AND (?3 IS NULL OR agent = ?3) AND (?4 IS NULL OR resource_slug = ?4)
              AND (?5 IS NULL OR record_id = ?5) AND ",
            $after,
            " ORDER BY created_at DESC, id DESC LIMIT (SELECT ?8)"
        )
    };
}

/// The first page of a subject's conversations, newest first: `?1` namespace, `?2` subject,
/// `?3` agent, `?4` resource slug, `?5` record id (each NULL when not asked), `?6` and `?7`
/// NULL, `?8` limit. Two statements, this and [`LIST_AFTER`], rather than `?6 IS NULL OR …`,
/// so that both seek the index.
pub const LIST_FIRST: &str = list_page!("?6 IS NULL AND ?7 IS NULL");

/// The page after a cursor: as [`LIST_FIRST`], with `?6` and `?7` the `created_at` and id of
/// the last conversation seen.
pub const LIST_AFTER: &str = list_page!("(created_at, id) < (?6, ?7)");

/// The statement of a page: [`LIST_AFTER`] when it continues after a cursor, else
/// [`LIST_FIRST`].
pub fn list_page(after_cursor: bool) -> &'static str {
    if after_cursor {
        LIST_AFTER
    } else {
        LIST_FIRST
    }
}

/// A conversation's row and last seq: `?1` namespace, `?2` subject, `?3` id.
pub const PK_AND_LAST_SEQ: &str = "SELECT pk, last_seq FROM conversations
    WHERE namespace = ?1 AND subject = ?2 AND id = ?3";

/// Deletes a conversation's messages up to a seq: `?1` conversation pk, `?2` seq.
pub const DELETE_MESSAGES_THROUGH: &str = "DELETE FROM messages
    WHERE conversation = ?1 AND seq <= ?2";

/// Creates a conversation unless its id is taken (no row changed then): `?1` namespace, `?2`
/// subject, `?3` id, `?4` agent, `?5` title, `?6` metadata, `?7` resource slug, `?8` record id,
/// `?9` now.
pub const INSERT: &str =
    "INSERT INTO conversations (namespace, subject, id, agent, title, metadata,
        resource_slug, record_id, created_at, updated_at, last_seq)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?9, 0)
    ON CONFLICT (namespace, subject, id) DO NOTHING";

/// Sets a conversation's title and metadata: `?1` title, `?2` metadata, `?3` now, `?4` namespace,
/// `?5` subject, `?6` id.
pub const UPDATE_TITLE_AND_METADATA: &str =
    "UPDATE conversations SET title = ?1, metadata = ?2, updated_at = ?3
    WHERE namespace = ?4 AND subject = ?5 AND id = ?6";

/// Deletes a conversation (its messages and cursors cascade): `?1` pk.
pub const DELETE_BY_PK: &str = "DELETE FROM conversations WHERE pk = ?1";

/// A conversation's cursor, in one statement (its own snapshot): one row when the conversation
/// (`?1` namespace, `?2` subject, `?3` id) exists, holding the value of its cursor `?4` (NULL when
/// never advanced); no row when the conversation does not.
pub const CURSOR: &str = "SELECT cursors.value FROM conversations
    LEFT JOIN cursors ON cursors.conversation = conversations.pk AND cursors.name = ?4
    WHERE conversations.namespace = ?1 AND conversations.subject = ?2 AND conversations.id = ?3";

/// Moves a cursor forward only, returning where it stands: `?1` conversation pk, `?2` name, `?3`
/// value.
pub const ADVANCE_CURSOR: &str = "INSERT INTO cursors (conversation, name, value)
    VALUES (?1, ?2, ?3)
    ON CONFLICT (conversation, name) DO UPDATE SET value = max(value, excluded.value)
    RETURNING value";

// The text of `APPEND_PROBE`, joined with others in one string by the constants below.
macro_rules! append_probe {
    () => {
        "SELECT r.key, c.pk, c.last_seq, NULL, NULL FROM json_each(?1) r
         CROSS JOIN conversations c ON c.namespace = r.value ->> 0
                                   AND c.subject = r.value ->> 1 AND c.id = r.value ->> 2
         UNION ALL
         SELECT r.key, c.pk, c.last_seq, m.seq, m.body FROM json_each(?1) r
         CROSS JOIN conversations c ON c.namespace = r.value ->> 0
                                   AND c.subject = r.value ->> 1 AND c.id = r.value ->> 2
         CROSS JOIN json_each(r.value, '$[3]') i
         CROSS JOIN messages m ON m.conversation = c.pk AND m.id = i.value"
    };
}

// The text of `APPEND_INSERT`.
macro_rules! append_insert {
    () => {
        "INSERT INTO messages (conversation, seq, id, role, body)
         SELECT value ->> 0, value ->> 1, value ->> 2, value ->> 3, value ->> 4 FROM json_each(?1)"
    };
}

// The text of `APPEND_UPDATE`.
macro_rules! append_update {
    () => {
        "UPDATE conversations SET last_seq = u.value ->> 1, updated_at = u.value ->> 2
         FROM json_each(?2) u WHERE conversations.pk = u.value ->> 0"
    };
}

// The text of `APPEND_CHANGES`.
macro_rules! append_changes {
    () => {
        "INSERT INTO changes (namespace, subject, at, operation, within, records, principal)
         SELECT value ->> 0, value ->> 1, value ->> 2, 'append', value ->> 3, value ->> 4,
                value ->> 5
         FROM json_each(?3)"
    };
}

/// The appends' read: for each `[namespace, subject, conversation id, [message ids]]` of `?1`
/// ([`AppendGroup::asked`]) whose conversation exists, a row (its index, pk, last seq, NULL,
/// NULL) and one more per message id it holds (index, pk, last seq, seq, body). `CROSS JOIN`
/// keeps SQLite's planner to this order: each id is one lookup in `messages_by_id` however long
/// the thread, where joining on the conversation first scans its messages.
pub const APPEND_PROBE: &str = append_probe!();

/// [`APPEND_PROBE`] after `BEGIN IMMEDIATE`, for a driver that lets `BEGIN` ride in a group's
/// first statement string ([`Conn::first`](crate::driver::Conn::first)).
pub const APPEND_PROBE_BEGINNING: &str = concat!("BEGIN IMMEDIATE;\n", append_probe!());

/// The appends' write, part one: every new message from `?1`, one JSON array of `[pk, seq, id,
/// role, body]` ([`AppendGroup::write`]).
pub const APPEND_INSERT: &str = append_insert!();

/// The appends' write, part two: every conversation's new last seq from `?2`, one JSON array
/// of `[pk, last seq, updated at]` ([`AppendGroup::write`]); `?1` is unused (bind NULL).
pub const APPEND_UPDATE: &str = append_update!();

/// The appends' write, part three: each append's change in the feed from `?3`, one JSON array
/// of `[namespace, subject, at, conversation id, records, principal]` in request order
/// ([`AppendGroup::write`]); `?1` and `?2` are unused (bind NULL).
pub const APPEND_CHANGES: &str = append_changes!();

/// The appends' write in one string, [`APPEND_INSERT`], [`APPEND_UPDATE`] and
/// [`APPEND_CHANGES`], for a driver that sends several statements with one binding
/// ([`Conn::JOINS_STATEMENTS`](crate::driver::Conn::JOINS_STATEMENTS)).
pub const APPEND_WRITE: &str = concat!(
    append_insert!(),
    ";\n",
    append_update!(),
    ";\n",
    append_changes!()
);

/// [`APPEND_WRITE`] then `COMMIT` ([`Conn::last`](crate::driver::Conn::last)).
pub const APPEND_WRITE_COMMITTING: &str = concat!(
    append_insert!(),
    ";\n",
    append_update!(),
    ";\n",
    append_changes!(),
    ";\nCOMMIT"
);

// A read of a conversation's messages, `$which` narrowing and ordering them (see `LOAD`).
macro_rules! messages_read {
    ($which:literal) => {
        concat!(
            "SELECT EXISTS (SELECT 1 FROM conversations
                            WHERE namespace = ?1 AND subject = ?2 AND id = ?3),
                    (SELECT '[' || group_concat('[' || seq || ',' || body || ']', ',') || ']'
                     FROM (SELECT seq, body FROM messages
                           WHERE conversation = (SELECT pk FROM conversations
                                                 WHERE namespace = ?1 AND subject = ?2
                                                   AND id = ?3) ",
            $which,
            "))"
        )
    };
}

/// A conversation's messages as one JSON value, `[[seq, body], …]` in no particular order (NULL
/// when there are none), beside whether the conversation exists, so one statement (one
/// snapshot) answers both. SQLite builds the one value for less than a driver hands the rows
/// over one at a time (sqlx's, from its worker thread); the bodies are the JSON the store wrote,
/// spliced in as they are. `?1` namespace, `?2` subject, `?3` id; the messages after seq `?4`
/// and before `?5`, of the roles in the JSON array `?6` (all when NULL), the last `?7` of them
/// (all when negative).
pub const LOAD: &str = messages_read!(
    "AND seq > ?4 AND seq < ?5
     AND (?6 IS NULL OR role IN (SELECT value FROM json_each(?6)))
     ORDER BY seq DESC LIMIT (SELECT ?7)"
);

/// A conversation's messages at the seqs of the JSON array `?4`, as [`LOAD`] reads them.
pub const LOAD_SEQS: &str = messages_read!("AND seq IN (SELECT value FROM json_each(?4))");

/// An append waiting for a write group, with its own clock reading.
#[derive(Debug)]
pub struct AppendRequest {
    /// The conversation's scope.
    pub scope: Scope,
    /// The conversation.
    pub id: ConversationId,
    /// The batch, in order.
    pub messages: Vec<Message>,
    /// Its options (expected last seq, storage limit).
    pub options: AppendOptions,
    /// When it was asked: the conversation's new `updated_at`.
    pub now: Timestamp,
    /// Who asked: the principal its change in the feed names, read in the asking task.
    pub writer: Principal,
}

impl AppendRequest {
    /// An append of `messages` to the conversation `id` of `scope`, asked `now`.
    pub fn new(
        scope: &Scope,
        id: &ConversationId,
        messages: Vec<Message>,
        options: AppendOptions,
        now: Timestamp,
    ) -> Self {
        Self {
            scope: scope.clone(),
            id: id.clone(),
            messages,
            options,
            now,
            writer: mnemix_core::changes::writer(),
        }
    }
}

/// A row of [`APPEND_PROBE`], decoded: the request's index, its conversation's pk and last
/// seq, and on the rows of a stored message, its seq and the message.
#[derive(Debug)]
pub struct ProbeRow {
    /// The request's index in the group.
    pub index: i64,
    /// Its conversation's primary key.
    pub pk: i64,
    /// Its conversation's last seq.
    pub last_seq: u64,
    /// A stored message of the batch's ids, with its seq.
    pub stored: Option<(u64, Message)>,
}

/// The appends of one write group, decided together in a fixed number of statements whatever
/// their number: [`APPEND_PROBE`] reads every conversation and those of each batch's ids it
/// holds, then [`APPEND_INSERT`] and [`APPEND_UPDATE`] write every new message and every
/// conversation's new last seq. Each append is decided on its own, in queue order — two appends
/// to one conversation see each other as they would one after another — and answers with its
/// receipt or its own error (not found, conflict, invalid input), decided before anything is
/// written.
#[derive(Debug)]
pub struct AppendGroup {
    /// Each request's receipt or its own error, in request order.
    pub outcomes: Vec<Result<AppendReceipt>>,
    /// The write's `?1` (new messages), `?2` (conversations' last seqs) and `?3` (the feed's
    /// changes); `None` when nothing is new.
    pub write: Option<(String, String, String)>,
    /// The storage limits to apply after the write: (request index, conversation pk, the seq
    /// through which [`DELETE_MESSAGES_THROUGH`] deletes). Seqs are contiguous (nothing deletes
    /// single messages), so the oldest beyond a limit are exactly those through `last_seq - max`.
    pub prunes: Vec<(usize, i64, u64)>,
}

impl AppendGroup {
    /// [`APPEND_PROBE`]'s `?1` for `requests`.
    pub fn asked(requests: &[AppendRequest]) -> String {
        // [namespace, subject, conversation id, [message ids]], the request's index its key
        let asked: Vec<(&str, &str, &str, Vec<&str>)> = requests
            .iter()
            .map(|r| {
                (
                    r.scope.namespace().as_str(),
                    r.scope.subject().map_or("", |s| s.as_str()),
                    r.id.as_str(),
                    r.messages.iter().map(|m| m.id.as_str()).collect(),
                )
            })
            .collect();
        to_json(&asked)
    }

    /// Decides each of `requests` from what [`APPEND_PROBE`] read for them.
    pub fn plan(requests: Vec<AppendRequest>, probe: Vec<ProbeRow>) -> Self {
        // Per request: its conversation (pk, last seq); per conversation: the messages known so
        // far, stored or appended earlier in this group.
        let mut found: HashMap<i64, (i64, u64)> = HashMap::new();
        let mut known: HashMap<i64, HashMap<MessageId, (u64, Message)>> = HashMap::new();
        for row in probe {
            found.insert(row.index, (row.pk, row.last_seq));
            if let Some((seq, message)) = row.stored {
                known
                    .entry(row.pk)
                    .or_default()
                    .insert(message.id.clone(), (seq, message));
            }
        }
        let mut last_seqs: HashMap<i64, (u64, Timestamp)> = HashMap::new();
        // [pk, seq, id, role, body] of every new message; the body is the message's JSON
        // carried as a JSON string, so it is stored byte for byte.
        let mut fresh_rows: Vec<(i64, u64, String, &'static str, String)> = Vec::new();
        let mut prunes = Vec::new();
        // [namespace, subject, at, conversation id, records, principal] of each append that
        // wrote something.
        let mut changes: Vec<(String, String, i64, String, String, String)> = Vec::new();
        let mut outcomes = Vec::with_capacity(requests.len());
        for (i, request) in requests.into_iter().enumerate() {
            let Some(&(pk, stored_last)) = i64::try_from(i).ok().and_then(|i| found.get(&i)) else {
                outcomes.push(Err(MemoryError::not_found(
                    "conversation",
                    request.id.as_str(),
                )));
                continue;
            };
            let last_seq = last_seqs.get(&pk).map_or(stored_last, |(seq, _)| *seq);
            let messages = known.entry(pk).or_default();
            let plan = plan_append(last_seq, request.messages, &request.options, |id| {
                messages.get(id).map(|(seq, m)| (*seq, m))
            });
            let AppendPlan { fresh, receipt } = match plan {
                Ok(plan) => plan,
                Err(e) => {
                    outcomes.push(Err(e));
                    continue;
                }
            };
            if !fresh.is_empty() {
                let change = NewChange::new(Operation::Append, &request.scope)
                    .within(request.id.as_str())
                    .records(fresh.iter().map(|m| m.message.id.as_str()));
                changes.push((
                    request.scope.namespace().as_str().to_owned(),
                    change.subject_column().to_owned(),
                    request.now.as_millis(),
                    request.id.to_string(),
                    change.records_column(),
                    to_json(&request.writer),
                ));
                last_seqs.insert(pk, (receipt.last_seq, request.now));
                if let Some(cutoff) = request
                    .options
                    .max_messages
                    .and_then(|max| receipt.last_seq.checked_sub(max))
                {
                    prunes.push((i, pk, cutoff));
                }
            }
            for StoredMessage { seq, message } in fresh {
                fresh_rows.push((
                    pk,
                    seq,
                    message.id.to_string(),
                    message.role.as_str(),
                    to_json(&message),
                ));
                messages.insert(message.id.clone(), (seq, message));
            }
            outcomes.push(Ok(receipt));
        }
        let write = (!fresh_rows.is_empty()).then(|| {
            let conversations: Vec<(i64, u64, i64)> = last_seqs
                .iter()
                .map(|(pk, (seq, now))| (*pk, *seq, now.as_millis()))
                .collect();
            (
                to_json(&fresh_rows),
                to_json(&conversations),
                to_json(&changes),
            )
        });
        Self {
            outcomes,
            write,
            prunes,
        }
    }

    /// Records what the storage limit of request `index` deleted.
    pub fn pruned(&mut self, index: usize, count: u64) {
        if let Some(Ok(receipt)) = self.outcomes.get_mut(index) {
            receipt.pruned = count;
        }
    }
}

fn to_json(value: &impl serde::Serialize) -> String {
    serde_json::to_string(value).expect("model types serialize to JSON")
}
