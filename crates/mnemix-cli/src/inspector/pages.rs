//! The pages. Each reads one page of what it shows (keyset-paged by the store's cursors) in the
//! scope of its path, which the viewer must be allowed to see: another scope is 404, as one that
//! does not exist.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::{Extension, Form};
use maud::{html, Markup};
use mnemix::engine::{Explained, MessageVerdict};
use mnemix_core::transfer::{ExportHeader, ExportWriter};
use mnemix_core::{
    ConversationId, ConversationQuery, FactQuery, LoadOptions, MemoryError, Namespace, RecallQuery,
    Scope, StoredMessage, Subject, Timestamp, WorkingMemoryFormat, WorkingMemoryKey,
    WorkingMemoryUpdate,
};
use serde::Deserialize;

use super::access::Viewer;
use super::view::{self, json, next_page, page, parts, query, segment, when};
use super::Inspector;
use crate::mcp::Grant;

/// Rows a listing shows at once.
const PAGE_ROWS: usize = 50;
/// Subjects a namespace page shows at once (each costs two small reads).
const SUBJECT_ROWS: usize = 25;
/// How far a subject's counts are taken before they say "N+" (the largest page a store gives).
const COUNT_CAP: usize = mnemix_core::limits::MAX_PAGE_SIZE;
/// Messages a conversation page shows at once.
const MESSAGE_ROWS: usize = 100;

/// Why a page could not be shown.
pub enum Failure {
    /// Missing, or not the viewer's to see: the same answer for both.
    NotFound,
    /// The request's input is wrong.
    BadInput(String),
    /// Not allowed in this mode.
    Refused(String),
    /// The store failed.
    Store(MemoryError),
}

impl From<MemoryError> for Failure {
    fn from(error: MemoryError) -> Self {
        match error {
            MemoryError::NotFound { .. } => Self::NotFound,
            MemoryError::InvalidInput(why) => Self::BadInput(why),
            other => Self::Store(other),
        }
    }
}

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        match self {
            Self::NotFound => view::refusal(StatusCode::NOT_FOUND, "Nothing here."),
            Self::BadInput(why) => view::refusal(StatusCode::BAD_REQUEST, &why),
            Self::Refused(why) => view::refusal(StatusCode::FORBIDDEN, &why),
            Self::Store(error) => view::refusal(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("The store failed: {error}"),
            ),
        }
    }
}

type Page = Result<Response, Failure>;

/// A scope the viewer may see, from a path's namespace and subject.
struct At {
    scope: Scope,
    /// The scope's pages start here.
    base: String,
}

impl At {
    fn new(viewer: &Viewer, namespace: &str, subject: &str) -> Result<Self, Failure> {
        let scope = Scope::new(namespace, subject).map_err(|_| Failure::NotFound)?;
        if !viewer.sees(&scope) {
            return Err(Failure::NotFound);
        }
        Ok(Self {
            base: format!("/s/{}/{}", segment(namespace), segment(subject)),
            scope,
        })
    }

    fn namespace(&self) -> &str {
        self.scope.namespace().as_str()
    }

    fn subject(&self) -> &str {
        self.scope.subject().map_or("", Subject::as_str)
    }

    /// The breadcrumb trail to this scope, then `more`.
    fn trail(&self, more: &[(&str, &str)]) -> Vec<(String, String)> {
        let mut trail = vec![
            (
                format!("/ns/{}", segment(self.namespace())),
                self.namespace().to_owned(),
            ),
            (self.base.clone(), self.subject().to_owned()),
        ];
        trail.extend(
            more.iter()
                .map(|(path, label)| (format!("{}{path}", self.base), (*label).to_owned())),
        );
        trail
    }
}

fn html_page(page: Html<String>) -> Response {
    page.into_response()
}

/// `GET /`: an admin chooses a namespace; a scoped key goes to its subject.
pub async fn home(
    State(inspector): State<Arc<Inspector>>,
    Extension(viewer): Extension<Viewer>,
) -> Page {
    if let Grant::Scope(scope) = &viewer.grant {
        let subject = scope.subject().map_or("", Subject::as_str);
        return Ok(Redirect::to(&format!(
            "/s/{}/{}",
            segment(scope.namespace().as_str()),
            segment(subject)
        ))
        .into_response());
    }
    let namespaces = inspector.store.namespaces().await?;
    Ok(html_page(page(
        "Namespaces",
        Some(&viewer),
        &[],
        &html! {
            @if namespaces.is_empty() { p.muted { "This store holds nothing yet." } }
            ul {
                @for namespace in &namespaces {
                    li { a href=(format!("/ns/{}", segment(namespace.as_str()))) { (namespace.as_str()) } }
                }
            }
            p.muted { (inspector.store.backend_name()) " · "
                (if inspector.writable { "writable" } else { "read-only" }) }
        },
    )))
}

#[derive(Deserialize, Default)]
pub struct SubjectSearch {
    #[serde(default)]
    q: String,
    #[serde(default)]
    after: String,
}

/// `GET /ns/{ns}`: the namespace's subjects, with counts and last activity.
pub async fn namespace(
    State(inspector): State<Arc<Inspector>>,
    Extension(viewer): Extension<Viewer>,
    Path(ns): Path<String>,
    Query(search): Query<SubjectSearch>,
) -> Page {
    let namespace = Namespace::new(&ns).map_err(|_| Failure::NotFound)?;
    if !viewer.sees_namespace(&namespace) {
        return Err(Failure::NotFound);
    }
    let scopes: Vec<Scope> = match &viewer.grant {
        Grant::Admin => inspector.store.scopes(&namespace).await?,
        Grant::Scope(own) => vec![own.clone()],
    };
    let mut subjects: Vec<&str> = scopes
        .iter()
        .filter_map(|s| s.subject().map(Subject::as_str))
        .filter(|s| s.contains(search.q.trim()) && *s > search.after.as_str())
        .collect();
    subjects.sort_unstable();
    let more = subjects.len() > SUBJECT_ROWS;
    subjects.truncate(SUBJECT_ROWS);
    let mut rows = Vec::with_capacity(subjects.len());
    for subject in &subjects {
        let scope = Scope::new(namespace.as_str(), *subject)?;
        rows.push((*subject, summary(&inspector, &scope).await?));
    }
    let next = more.then(|| {
        format!(
            "/ns/{}{}",
            segment(&ns),
            query(&[
                ("q", search.q.trim()),
                ("after", subjects.last().copied().unwrap_or(""))
            ])
        )
    });
    Ok(html_page(page(
        &format!("Namespace {ns}"),
        Some(&viewer),
        &[(format!("/ns/{}", segment(&ns)), ns.clone())],
        &html! {
            div.tabs { a href=(format!("/ns/{}/kinds", segment(&ns))) { "Kinds and grants" } }
            form.filters method="get" {
                label { "Subject " input type="search" name="q" value=(search.q) placeholder="part of an id"; }
                button type="submit" { "Search" }
            }
            table {
                thead { tr { th { "Subject" } th.num { "Conversations" } th.num { "Facts" } th { "Last activity" } } }
                tbody {
                    @for (subject, summary) in &rows {
                        tr {
                            td { a href=(format!("/s/{}/{}", segment(&ns), segment(subject))) { (subject) } }
                            td.num { (summary.conversations) }
                            td.num { (summary.facts) }
                            td { (summary.last_activity.map(when).unwrap_or_default()) }
                        }
                    }
                }
            }
            @if rows.is_empty() { p.muted { "No subject matches." } }
            (next_page(next))
        },
    )))
}

/// A subject at a glance.
struct Summary {
    conversations: String,
    facts: String,
    last_activity: Option<Timestamp>,
}

/// Counts up to [`COUNT_CAP`] (then "N+") and the newest change, from the newest-first
/// listings.
async fn summary(inspector: &Inspector, scope: &Scope) -> Result<Summary, Failure> {
    let conversations = inspector
        .store
        .list_conversations(scope, ConversationQuery::default().with_limit(COUNT_CAP))
        .await?;
    let facts = inspector
        .store
        .list_facts(scope, FactQuery::default().with_limit(COUNT_CAP))
        .await?;
    let capped = |n: usize, more: &Option<String>| {
        if more.is_some() {
            format!("{n}+")
        } else {
            n.to_string()
        }
    };
    let last_activity = conversations
        .items
        .iter()
        .map(|c| c.updated_at)
        .chain(facts.items.iter().map(|f| f.updated_at))
        .max();
    Ok(Summary {
        conversations: capped(conversations.items.len(), &conversations.next_cursor),
        facts: capped(facts.items.len(), &facts.next_cursor),
        last_activity,
    })
}

/// `GET /s/{ns}/{subject}`: what a subject owns, and what it can read through grants.
pub async fn subject(
    State(inspector): State<Arc<Inspector>>,
    Extension(viewer): Extension<Viewer>,
    Path((ns, subject)): Path<(String, String)>,
) -> Page {
    let at = At::new(&viewer, &ns, &subject)?;
    let summary = summary(&inspector, &at.scope).await?;
    let user_memory = inspector
        .store
        .get_working_memory(&at.scope, &WorkingMemoryKey::User)
        .await?;
    let grants = inspector.memories.grants(at.scope.namespace()).await?;
    let mine = at.subject();
    let granted_to: Vec<_> = grants
        .iter()
        .filter(|g| g.grantee.as_str() == mine)
        .collect();
    let granted_by: Vec<_> = grants.iter().filter(|g| g.owner.as_str() == mine).collect();
    // "View as": what this subject reads through its grants, as it would read it.
    let mut shared = Vec::new();
    for grant in &granted_to {
        let owner = Scope::new(at.namespace(), grant.owner.as_str())?;
        let mut query = FactQuery::default().with_limit(PAGE_ROWS);
        if let [kind] = grant.kinds.as_slice() {
            query = query.with_kind(kind.clone());
        }
        let facts = inspector.store.list_facts(&owner, query).await?;
        // The grant's own rule, as `Memories::search` applies it.
        let readable: Vec<_> = facts
            .items
            .into_iter()
            .filter(|f| grant.admits(f))
            .collect();
        shared.push((grant.owner.as_str(), readable));
    }
    Ok(html_page(page(
        &format!("Subject {}", at.subject()),
        Some(&viewer),
        &at.trail(&[]),
        &html! {
            (tabs(&at, inspector.writable))
            table {
                tbody {
                    tr { th { "Conversations" } td.num { (summary.conversations) } }
                    tr { th { "Facts (current)" } td.num { (summary.facts) } }
                    tr { th { "Last activity" } td { (summary.last_activity.map(when).unwrap_or_default()) } }
                    tr { th { "User working memory" } td {
                        @match &user_memory {
                            Some(doc) => { a href=(format!("{}/working", at.base)) { "revision " (doc.revision) } }
                            None => { span.muted { "none" } }
                        }
                    } }
                }
            }
            h2 { "Grants" }
            @if granted_to.is_empty() && granted_by.is_empty() { p.muted { "No grant names this subject." } }
            ul {
                @for grant in &granted_by {
                    li { "shares " (kinds_said(&grant.kinds)) " with " b { (grant.grantee.as_str()) } }
                }
                @for grant in &granted_to {
                    li { "reads " (kinds_said(&grant.kinds)) " of " b { (grant.owner.as_str()) } }
                }
            }
            @if !shared.is_empty() {
                h2 { "View as " (at.subject()) ": memories shared with it" }
                @for (owner, facts) in &shared {
                    h3 { "from " (owner) }
                    @if facts.is_empty() { p.muted { "none" } }
                    ul { @for fact in facts { li { span.tag { (fact.kind.as_deref().unwrap_or("")) } " " (fact.text) } } }
                }
            }
        },
    )))
}

fn kinds_said(kinds: &[String]) -> String {
    if kinds.is_empty() {
        "every kind".to_owned()
    } else {
        kinds.join(", ")
    }
}

fn tabs(at: &At, writable: bool) -> Markup {
    html! {
        div.tabs {
            a href=(format!("{}/conversations", at.base)) { "Conversations" }
            a href=(format!("{}/facts", at.base)) { "Facts" }
            a href=(format!("{}/working", at.base)) { "Working memory" }
            a href=(format!("{}/recall", at.base)) { "Recall, explained" }
            a href=(format!("{}/stores", at.base)) { "Vectors and checkpoints" }
            a href=(format!("{}/export", at.base)) { "Export" }
            a href=(format!("{}/erase", at.base)) { (if writable { "Erase" } else { "Erasure (dry run)" }) }
        }
    }
}

#[derive(Deserialize, Default)]
pub struct Paging {
    #[serde(default)]
    after: String,
}

/// `GET /s/{ns}/{subject}/conversations`.
pub async fn conversations(
    State(inspector): State<Arc<Inspector>>,
    Extension(viewer): Extension<Viewer>,
    Path((ns, subject)): Path<(String, String)>,
    Query(paging): Query<Paging>,
) -> Page {
    let at = At::new(&viewer, &ns, &subject)?;
    let cursor = (!paging.after.is_empty()).then(|| paging.after.clone());
    let listed = inspector
        .store
        .list_conversations(
            &at.scope,
            ConversationQuery::default()
                .with_limit(PAGE_ROWS)
                .with_cursor(cursor),
        )
        .await?;
    let next = listed
        .next_cursor
        .map(|c| format!("{}/conversations{}", at.base, query(&[("after", &c)])));
    Ok(html_page(page(
        "Conversations",
        Some(&viewer),
        &at.trail(&[("/conversations", "conversations")]),
        &html! {
            table {
                thead { tr { th { "Conversation" } th { "Title" } th { "Agent" } th.num { "Messages" } th { "Updated" } } }
                tbody {
                    @for c in &listed.items {
                        tr {
                            td { a href=(format!("{}/conversations/{}", at.base, segment(c.id.as_str()))) { (c.id.as_str()) } }
                            td { (c.title.as_deref().unwrap_or("")) }
                            td { (c.agent.as_deref().unwrap_or("")) }
                            td.num { (c.last_seq) }
                            td { (when(c.updated_at)) }
                        }
                    }
                }
            }
            @if listed.items.is_empty() { p.muted { "No conversations." } }
            (next_page(next))
        },
    )))
}

#[derive(Deserialize, Default)]
pub struct Before {
    before: Option<u64>,
}

/// `GET /s/{ns}/{subject}/conversations/{id}`: the raw history beside the sanitized replay a
/// model would receive, with what sanitizing removed or changed marked.
pub async fn conversation(
    State(inspector): State<Arc<Inspector>>,
    Extension(viewer): Extension<Viewer>,
    Path((ns, subject, id)): Path<(String, String, String)>,
    Query(before): Query<Before>,
) -> Page {
    let at = At::new(&viewer, &ns, &subject)?;
    let id = ConversationId::new(id).map_err(|_| Failure::NotFound)?;
    let thread = inspector.store.get_conversation(&at.scope, &id).await?;
    let window = |options: LoadOptions| match before.before {
        Some(seq) => options.with_before_seq(seq),
        None => options,
    };
    let raw = inspector
        .store
        .load(
            &at.scope,
            &id,
            window(LoadOptions::raw().with_last(MESSAGE_ROWS)),
        )
        .await?;
    let replay = inspector
        .store
        .load(&at.scope, &id, window(LoadOptions::last(MESSAGE_ROWS)))
        .await?;
    let replayed: BTreeMap<u64, &StoredMessage> = replay.iter().map(|m| (m.seq, m)).collect();
    let removed = raw
        .iter()
        .filter(|m| !replayed.contains_key(&m.seq))
        .count();
    let earlier = raw.first().filter(|m| m.seq > 1).map(|m| {
        format!(
            "{}/conversations/{}{}",
            at.base,
            segment(id.as_str()),
            query(&[("before", &m.seq.to_string())])
        )
    });
    let conversation_path = format!("/conversations/{}", segment(id.as_str()));
    Ok(html_page(page(
        thread.title.as_deref().unwrap_or(id.as_str()),
        Some(&viewer),
        &at.trail(&[
            ("/conversations", "conversations"),
            (&conversation_path, id.as_str()),
        ]),
        &html! {
            p.muted {
                (thread.last_seq) " messages · updated " (when(thread.updated_at))
                @if let Some(agent) = &thread.agent { " · agent " (agent) }
                " · " a href=(format!("{}/working{}", at.base, query(&[("conversation", id.as_str())]))) { "working memory" }
                " · " a href=(format!("{}/recall{}", at.base, query(&[("conversation", id.as_str())]))) { "explain recall here" }
            }
            p {
                @if removed == 0 { span.ok { "Replay-safe: the model is replayed every message below as stored." } }
                @else { span.error { (removed) " of these messages are left out of the replay" } " (an unanswered tool call, an orphaned result, …)." }
            }
            table.conversation {
                thead { tr { th.num { "#" } th { "Role" } th { "Stored (raw)" } th { "Replayed to the model" } } }
                tbody {
                    @for message in &raw {
                        @let replayed = replayed.get(&message.seq);
                        @let class = match replayed {
                            None => "removed",
                            Some(r) if r.message.parts != message.message.parts => "changed",
                            Some(_) => "",
                        };
                        tr class=(class) id=(format!("m{}", message.seq)) {
                            td.num { (message.seq) }
                            td { (format!("{:?}", message.message.role).to_lowercase()) br; span.label { (when(message.message.created_at)) } }
                            td { (parts(message)) }
                            td {
                                @match replayed {
                                    None => { span.removed-note { "removed by sanitizing" } }
                                    Some(r) => { (parts(r)) }
                                }
                            }
                        }
                    }
                }
            }
            @if let Some(earlier) = earlier { p.pager { a href=(earlier) { "← Earlier messages" } } }
        },
    )))
}

#[derive(Deserialize, Default)]
pub struct FactFilter {
    #[serde(default)]
    kind: String,
    #[serde(default)]
    tag: String,
    #[serde(default)]
    q: String,
    #[serde(default)]
    after: String,
    #[serde(default)]
    history: String,
}

/// `GET /s/{ns}/{subject}/facts`: current facts (or every version), filtered by kind and tag,
/// or searched by text as recall would.
pub async fn facts(
    State(inspector): State<Arc<Inspector>>,
    Extension(viewer): Extension<Viewer>,
    Path((ns, subject)): Path<(String, String)>,
    Query(filter): Query<FactFilter>,
) -> Page {
    let at = At::new(&viewer, &ns, &subject)?;
    let kind = filter.kind.trim();
    let tag = filter.tag.trim();
    let text = filter.q.trim();
    let with_history = !filter.history.is_empty();
    let (rows, next): (Vec<(mnemix_core::Fact, Option<f64>)>, Option<String>) = if text.is_empty() {
        let mut facts_query = FactQuery::default()
            .with_limit(PAGE_ROWS)
            .with_include_superseded(with_history)
            .with_cursor((!filter.after.is_empty()).then(|| filter.after.clone()));
        if !kind.is_empty() {
            facts_query = facts_query.with_kind(kind);
        }
        if !tag.is_empty() {
            facts_query = facts_query.with_tags([tag]);
        }
        let listed = inspector.store.list_facts(&at.scope, facts_query).await?;
        let next = listed.next_cursor.map(|c| {
            format!(
                "{}/facts{}",
                at.base,
                query(&[
                    ("kind", kind),
                    ("tag", tag),
                    ("history", &filter.history),
                    ("after", &c)
                ])
            )
        });
        (listed.items.into_iter().map(|f| (f, None)).collect(), next)
    } else {
        let mut recall = RecallQuery::text(text).with_limit(PAGE_ROWS);
        if !kind.is_empty() {
            recall = recall.with_kind(kind);
        }
        if !tag.is_empty() {
            recall = recall.with_tags([tag]);
        }
        let found = inspector.store.recall(&at.scope, recall).await?;
        (
            found
                .into_iter()
                .map(|s| (s.fact, Some(s.relevance)))
                .collect(),
            None,
        )
    };
    Ok(html_page(page(
        "Facts",
        Some(&viewer),
        &at.trail(&[("/facts", "facts")]),
        &html! {
            form.filters method="get" {
                label { "Text " input type="search" name="q" value=(text) placeholder="recall by words"; }
                label { "Kind " input type="text" name="kind" value=(kind); }
                label { "Tag " input type="text" name="tag" value=(tag); }
                label { input type="checkbox" name="history" value="1" checked[with_history]; " superseded too" }
                button type="submit" { "Filter" }
            }
            (fact_table(&at, &rows))
            @if rows.is_empty() { p.muted { "No facts match." } }
            (next_page(next))
        },
    )))
}

fn fact_table(at: &At, rows: &[(mnemix_core::Fact, Option<f64>)]) -> Markup {
    let searched = rows.iter().any(|(_, relevance)| relevance.is_some());
    html! {
        table {
            thead { tr {
                th { "Fact" } th { "Kind" } th { "Key" } th { "Tags" } th.num { "Score" }
                @if searched { th.num { "Relevance" } }
                th { "Written by" } th { "True" }
                th { "Stored" } th { "Expires" } th { "Source" } th { "Superseded" }
            } }
            tbody {
                @for (fact, relevance) in rows {
                    tr {
                        td { p.text { (fact.text) } span.label { (fact.id.as_str()) } }
                        td { (fact.kind.as_deref().unwrap_or("")) }
                        td { @if let Some(key) = &fact.key {
                            a href=(format!("{}/facts/history{}", at.base, query(&[("key", key)]))) { (key) }
                        } }
                        td { @for tag in &fact.tags { span.tag { (tag) } } }
                        td.num { (fact.score.map(|s| format!("{s:.2}")).unwrap_or_default()) }
                        @if searched { td.num { (relevance.map(|r| format!("{r:.3}")).unwrap_or_default()) } }
                        td {
                            (fact.provenance.written_by.to_string()) br;
                            span.tag { (fact.provenance.origin.to_string()) }
                            @if let Some(claim) = &fact.provenance.claimed {
                                br; span.label { "file said: " (claim.written_by.to_string()) ", " (claim.origin.to_string()) }
                            }
                        }
                        td {
                            @if fact.valid_from.is_some() || fact.valid_until.is_some() {
                                (fact.valid_from.map_or_else(|| "…".to_owned(), when))
                                " – "
                                (fact.valid_until.map_or_else(|| "…".to_owned(), when))
                            }
                        }
                        td { (when(fact.created_at)) }
                        td { (fact.expires_at.map(when).unwrap_or_default()) }
                        td { @if let Some(source) = &fact.source {
                            a href=(format!("{}/conversations/{}", at.base, segment(source.conversation_id.as_str()))) {
                                (source.conversation_id.as_str())
                            }
                            @if !source.message_ids.is_empty() { br; span.label { (source.message_ids.len()) " messages" } }
                        } }
                        td { @if let Some(to) = fact.valid_to {
                            (when(to))
                            @if let Some(by) = &fact.superseded_by { br; span.label { "by " (by.as_str()) } }
                        } }
                    }
                }
            }
        }
    }
}

#[derive(Deserialize)]
pub struct KeyParam {
    key: String,
}

/// `GET /s/{ns}/{subject}/facts/history?key=…`: every version of a key, newest first.
pub async fn fact_history(
    State(inspector): State<Arc<Inspector>>,
    Extension(viewer): Extension<Viewer>,
    Path((ns, subject)): Path<(String, String)>,
    Query(param): Query<KeyParam>,
) -> Page {
    let at = At::new(&viewer, &ns, &subject)?;
    let versions = inspector.store.history(&at.scope, &param.key).await?;
    let rows: Vec<_> = versions.into_iter().map(|f| (f, None)).collect();
    Ok(html_page(page(
        &format!("History of {}", param.key),
        Some(&viewer),
        &at.trail(&[("/facts", "facts")]),
        &html! {
            (fact_table(&at, &rows))
            @if rows.is_empty() { p.muted { "No fact has this key." } }
        },
    )))
}

#[derive(Deserialize, Default)]
pub struct WorkingParam {
    #[serde(default)]
    conversation: String,
}

fn working_key(conversation: &str) -> Result<WorkingMemoryKey, Failure> {
    if conversation.is_empty() {
        return Ok(WorkingMemoryKey::User);
    }
    ConversationId::new(conversation)
        .map(WorkingMemoryKey::Conversation)
        .map_err(|_| Failure::NotFound)
}

/// `GET /s/{ns}/{subject}/working`: the user's document, or a conversation's.
pub async fn working_memory(
    State(inspector): State<Arc<Inspector>>,
    Extension(viewer): Extension<Viewer>,
    Path((ns, subject)): Path<(String, String)>,
    Query(param): Query<WorkingParam>,
) -> Page {
    let at = At::new(&viewer, &ns, &subject)?;
    let key = working_key(&param.conversation)?;
    if let WorkingMemoryKey::Conversation(id) = &key {
        inspector.store.get_conversation(&at.scope, id).await?;
    }
    let document = inspector.store.get_working_memory(&at.scope, &key).await?;
    Ok(html_page(working_page(
        &inspector,
        &viewer,
        &at,
        &param.conversation,
        document.as_ref(),
        None,
    )))
}

fn working_page(
    inspector: &Inspector,
    viewer: &Viewer,
    at: &At,
    conversation: &str,
    document: Option<&mnemix_core::WorkingMemory>,
    conflict: Option<&str>,
) -> Html<String> {
    let whose = if conversation.is_empty() {
        "the user's document".to_owned()
    } else {
        format!("conversation {conversation}")
    };
    let revision = document.as_ref().map_or(0, |d| d.revision);
    page(
        &format!("Working memory: {whose}"),
        Some(viewer),
        &at.trail(&[("/working", "working memory")]),
        &html! {
            @if let Some(attempt) = conflict {
                div.conflict {
                    p.error { "Not saved: the document changed since you opened it (now revision " (revision) "). "
                        "Below is the newer text; your edit is in the box, to merge and save again." }
                    details { summary { "Your edit" } pre { (attempt) } }
                }
            }
            @match document {
                Some(doc) => {
                    p.muted { (doc.format.as_str()) " · revision " (doc.revision) " · updated " (when(doc.updated_at)) }
                    @if doc.format == WorkingMemoryFormat::Json {
                        @match serde_json::from_str::<serde_json::Value>(&doc.content) {
                            Ok(value) => { (json(&value)) }
                            Err(_) => { pre { (doc.content) } }
                        }
                    } @else {
                        pre.markdown { (doc.content) }
                    }
                }
                None => { p.muted { "No document yet." } }
            }
            @if inspector.writable {
                h2 { "Edit" }
                form method="post" {
                    (view::csrf(viewer))
                    input type="hidden" name="revision" value=(revision);
                    input type="hidden" name="conversation" value=(conversation);
                    input type="hidden" name="format" value=(document.map_or("markdown", |d| d.format.as_str()));
                    textarea name="content" {
                        (conflict.map_or_else(|| document.map(|d| d.content.clone()).unwrap_or_default(), str::to_owned))
                    }
                    button type="submit" { "Save (only if nobody changed it meanwhile)" }
                }
            } @else {
                p.muted { "Read-only: start with " code { "--writable" } " to edit." }
            }
        },
    )
}

#[derive(Deserialize)]
pub struct WorkingEdit {
    content: String,
    revision: u64,
    #[serde(default)]
    conversation: String,
    #[serde(default)]
    format: String,
}

/// `POST /s/{ns}/{subject}/working`: a compare-and-set edit; a stale one shows the newer text
/// and overwrites nothing.
pub async fn edit_working_memory(
    State(inspector): State<Arc<Inspector>>,
    Extension(viewer): Extension<Viewer>,
    Path((ns, subject)): Path<(String, String)>,
    Form(edit): Form<WorkingEdit>,
) -> Page {
    let at = At::new(&viewer, &ns, &subject)?;
    if !inspector.writable {
        return Err(read_only());
    }
    let key = working_key(&edit.conversation)?;
    if let WorkingMemoryKey::Conversation(id) = &key {
        inspector.store.get_conversation(&at.scope, id).await?;
    }
    let format = WorkingMemoryFormat::parse(&edit.format).unwrap_or_default();
    let update = match format {
        WorkingMemoryFormat::Json => WorkingMemoryUpdate::json(edit.content.clone()),
        WorkingMemoryFormat::Markdown => WorkingMemoryUpdate::markdown(edit.content.clone()),
    }
    .expecting(edit.revision);
    match inspector
        .written_by(&viewer)
        .set_working_memory(&at.scope, &key, update)
        .await
    {
        Ok(_) => Ok(Redirect::to(&format!(
            "{}/working{}",
            at.base,
            query(&[("conversation", &edit.conversation)])
        ))
        .into_response()),
        Err(MemoryError::Conflict { .. }) => {
            let newer = inspector.store.get_working_memory(&at.scope, &key).await?;
            Ok((
                StatusCode::CONFLICT,
                working_page(
                    &inspector,
                    &viewer,
                    &at,
                    &edit.conversation,
                    newer.as_ref(),
                    Some(&edit.content),
                ),
            )
                .into_response())
        }
        Err(other) => Err(other.into()),
    }
}

fn read_only() -> Failure {
    Failure::Refused(
        "This inspector is read-only: start it with --writable to change memory.".into(),
    )
}

#[derive(Deserialize, Default)]
pub struct RecallParam {
    #[serde(default)]
    conversation: String,
    #[serde(default)]
    q: String,
}

/// `GET /s/{ns}/{subject}/recall`: the context `prepare` would build for a question, and why
/// recall chose each candidate.
pub async fn recall(
    State(inspector): State<Arc<Inspector>>,
    Extension(viewer): Extension<Viewer>,
    Path((ns, subject)): Path<(String, String)>,
    Query(param): Query<RecallParam>,
) -> Page {
    let at = At::new(&viewer, &ns, &subject)?;
    let threads = inspector
        .store
        .list_conversations(
            &at.scope,
            ConversationQuery::default().with_limit(PAGE_ROWS),
        )
        .await?;
    let question = param.q.trim();
    let explained = if param.conversation.is_empty() || question.is_empty() {
        None
    } else {
        let id = ConversationId::new(param.conversation.clone()).map_err(|_| Failure::NotFound)?;
        let explained = inspector.memory.explain(&at.scope, &id, question).await?;
        let seqs: Vec<u64> = explained.recall.messages.iter().map(|m| m.seq).collect();
        let texts: BTreeMap<u64, StoredMessage> = inspector
            .store
            .load_seqs(&at.scope, &id, &seqs)
            .await?
            .into_iter()
            .map(|m| (m.seq, m))
            .collect();
        Some((id, explained, texts))
    };
    Ok(html_page(page(
        "Recall, explained",
        Some(&viewer),
        &at.trail(&[("/recall", "recall")]),
        &html! {
            form.filters method="get" {
                label { "Conversation "
                    select name="conversation" {
                        @for c in &threads.items {
                            option value=(c.id.as_str()) selected[c.id.as_str() == param.conversation] {
                                (c.title.as_deref().unwrap_or(c.id.as_str()))
                            }
                        }
                    }
                }
                label { "The user says " input type="text" name="q" value=(question) size="50" required; }
                button type="submit" { "Explain" }
            }
            @if threads.items.is_empty() { p.muted { "This subject has no conversation to recall in." } }
            @if let Some((id, explained, texts)) = &explained { (explanation(&at, id, explained, texts)) }
        },
    )))
}

fn verdict_said(verdict: MessageVerdict) -> &'static str {
    match verdict {
        MessageVerdict::Recalled => "recalled",
        MessageVerdict::PastLimit => "cut: ranked past the recall limit",
        MessageVerdict::InWindow => "not recalled: in the window already",
        MessageVerdict::PastCandidates => "cut: past the candidates pooled",
        MessageVerdict::Pruned => "cut: deleted since it was embedded",
    }
}

fn explanation(
    at: &At,
    id: &ConversationId,
    explained: &Explained,
    texts: &BTreeMap<u64, StoredMessage>,
) -> Markup {
    let context = &explained.context;
    let recall = &explained.recall;
    let number = |v: Option<f64>| v.map(|v| format!("{v:.4}")).unwrap_or_default();
    let conversation = format!("{}/conversations/{}", at.base, segment(id.as_str()));
    html! {
        h2 { "The context" }
        p.muted {
            "Window from message " (recall.window_start) " on: " (context.messages.len()) " messages; "
            (context.recalled.len()) " recalled; " (context.facts.len()) " facts injected"
            @if let Some(model) = &context.embedder { "; embedder " (model) }
            "."
        }
        details {
            summary { "The system prompt it builds (before the agent's own instructions)" }
            pre { (context.system_prompt("")) }
        }
        details {
            summary { "The messages the model is replayed" }
            table { tbody { @for message in &context.messages {
                tr { td.num { (message.seq) } td { (parts(message)) } }
            } } }
        }
        h2 { "Messages weighed by semantic recall" }
        @if recall.messages.is_empty() { p.muted { "None: semantic recall is off, found nothing before the window, or the conversation has no embedded messages." } }
        @else {
            table {
                thead { tr {
                    th.num { "#" } th { "Message" } th.num { "Similarity" } th.num { "Nearness rank" }
                    th.num { "Own word relevance" } th.num { "With carry" } th.num { "Word rank" }
                    th.num { "Fused" } th { "Verdict" }
                } }
                tbody {
                    @for candidate in &recall.messages {
                        tr class=(if candidate.verdict == MessageVerdict::Recalled { "recalled" } else { "" }) {
                            td.num { a href=(format!("{conversation}#m{}", candidate.seq)) { (candidate.seq) } }
                            td { @if let Some(message) = texts.get(&candidate.seq) { (parts(message)) } }
                            td.num { (candidate.similarity.map(|s| format!("{s:.4}")).unwrap_or_default()) }
                            td.num { (candidate.nearness_rank.map(|r| r.to_string()).unwrap_or_default()) }
                            td.num { (number(candidate.own_relevance)) }
                            td.num { (number(candidate.relevance)) }
                            td.num { (candidate.word_rank.map(|r| r.to_string()).unwrap_or_default()) }
                            td.num { (number(candidate.fused)) }
                            td { (verdict_said(candidate.verdict)) }
                        }
                    }
                }
            }
        }
        h2 { "Facts recalled" }
        @if recall.facts.is_empty() { p.muted { "None: the facts tier is off or found nothing." } }
        @else {
            table {
                thead { tr { th { "Fact" } th.num { "Relevance" } th.num { "Score" } th { "Verdict" } } }
                tbody {
                    @for candidate in &recall.facts {
                        @let text = context.facts.iter().find(|f| f.fact.id == candidate.id).map(|f| f.fact.text.as_str());
                        tr class=(if candidate.injected { "recalled" } else { "" }) {
                            td { (text.unwrap_or(candidate.id.as_str())) }
                            td.num { (format!("{:.4}", candidate.relevance)) }
                            td.num { (candidate.score.map(|s| format!("{s:.2}")).unwrap_or_default()) }
                            td { (if candidate.injected { "injected" } else { "cut: over the token budget" }) }
                        }
                    }
                }
            }
        }
    }
}

/// `GET /s/{ns}/{subject}/erase`: a dry run, counted per record type.
pub async fn erase_preview(
    State(inspector): State<Arc<Inspector>>,
    Extension(viewer): Extension<Viewer>,
    Path((ns, subject)): Path<(String, String)>,
) -> Page {
    let at = At::new(&viewer, &ns, &subject)?;
    let held = inspector.store.count_owned(&at.scope).await?;
    Ok(html_page(page(
        &format!("Erase {}", at.subject()),
        Some(&viewer),
        &at.trail(&[("/erase", "erase")]),
        &html! {
            p { "A dry run: nothing is erased. Erasing removes every record this subject owns, as its receipt will count them:" }
            table {
                thead { tr { th { "Record type" } th.num { "Records" } } }
                tbody { @for (kind, n) in held.counts() { tr { td { (kind) } td.num { (n) } } } }
            }
            @if held.total() == 0 { p.muted { "It owns no records." } }
            @if inspector.writable {
                form method="post" {
                    (view::csrf(&viewer))
                    label { "Type the subject's id to confirm " input type="text" name="confirm" autocomplete="off" required; }
                    button.danger type="submit" { "Erase everything it owns" }
                }
            } @else {
                p.muted { "Read-only: start with " code { "--writable" } " to erase." }
            }
        },
    )))
}

#[derive(Deserialize)]
pub struct EraseForm {
    #[serde(default)]
    confirm: String,
}

/// `POST /s/{ns}/{subject}/erase`: erases what the subject owns and shows the receipt.
pub async fn erase(
    State(inspector): State<Arc<Inspector>>,
    Extension(viewer): Extension<Viewer>,
    Path((ns, subject)): Path<(String, String)>,
    Form(form): Form<EraseForm>,
) -> Page {
    let at = At::new(&viewer, &ns, &subject)?;
    if !inspector.writable {
        return Err(read_only());
    }
    if form.confirm != at.subject() {
        return Err(Failure::BadInput(
            "Not erased: the confirmation does not name this subject.".into(),
        ));
    }
    let receipt = inspector.written_by(&viewer).forget_all(&at.scope).await?;
    let receipt_json = serde_json::to_value(receipt).unwrap_or_default();
    Ok(html_page(page(
        &format!("Erased {}", at.subject()),
        Some(&viewer),
        &at.trail(&[]),
        &html! {
            p.ok { "Erased " (receipt.total()) " records." }
            h2 { "Receipt" }
            (json(&receipt_json))
        },
    )))
}

/// `GET /s/{ns}/{subject}/export`: the subject's records as the verified JSON Lines file
/// `mnemix import` reads.
pub async fn export(
    State(inspector): State<Arc<Inspector>>,
    Extension(viewer): Extension<Viewer>,
    Path((ns, subject)): Path<(String, String)>,
) -> Page {
    let at = At::new(&viewer, &ns, &subject)?;
    let records = inspector.store.export_scope(&at.scope).await?;
    let header = ExportHeader::new(inspector.store.backend_name(), Timestamp::now());
    let mut out = ExportWriter::new(Vec::new(), &header)?;
    for record in &records {
        out.write(record)?;
    }
    let bytes = out.finish()?;
    let file = format!("{}-{}.jsonl", at.namespace(), at.subject());
    let disposition = format!(
        "attachment; filename=\"{}\"",
        file.replace(['"', '\\'], "_")
    );
    Ok((
        [
            (header::CONTENT_TYPE, "application/jsonl".to_owned()),
            (header::CONTENT_DISPOSITION, disposition),
        ],
        bytes,
    )
        .into_response())
}

/// `GET /s/{ns}/{subject}/stores`: the namespace's vector collections and the subject's
/// suspended checkpoints.
pub async fn stores(
    State(inspector): State<Arc<Inspector>>,
    Extension(viewer): Extension<Viewer>,
    Path((ns, subject)): Path<(String, String)>,
) -> Page {
    let at = At::new(&viewer, &ns, &subject)?;
    let collections = inspector
        .store
        .list_collections(at.scope.namespace())
        .await?;
    let checkpoints = inspector.store.list_suspended(&at.scope, None).await?;
    Ok(html_page(page(
        "Vectors and checkpoints",
        Some(&viewer),
        &at.trail(&[("/stores", "vectors and checkpoints")]),
        &html! {
            h2 { "Vector collections of " (at.namespace()) }
            table {
                thead { tr { th { "Collection" } th.num { "Dimensions" } th { "Metric" } th { "Model" } } }
                tbody { @for c in &collections { tr { td { (c.name) } td.num { (c.dims) } td { (c.metric.as_str()) } td { (c.model) } } } }
            }
            @if collections.is_empty() { p.muted { "No collections." } }
            h2 { "Suspended checkpoints" }
            table {
                thead { tr { th { "Checkpoint" } th { "Workflow" } th.num { "Version" } th { "Updated" } th { "State" } } }
                tbody { @for c in &checkpoints { tr {
                    td { (c.id.as_str()) } td { (c.workflow) } td.num { (c.version) } td { (when(c.updated_at)) }
                    td { details { summary { "state" } (json(&c.state)) } }
                } } }
            }
            @if checkpoints.is_empty() { p.muted { "No suspended checkpoints." } }
        },
    )))
}

/// `GET /ns/{ns}/kinds`: the namespace's kinds of structured memory and its grants (a scoped
/// key sees the grants that name its subject).
pub async fn kinds(
    State(inspector): State<Arc<Inspector>>,
    Extension(viewer): Extension<Viewer>,
    Path(ns): Path<String>,
) -> Page {
    let namespace = Namespace::new(&ns).map_err(|_| Failure::NotFound)?;
    if !viewer.sees_namespace(&namespace) {
        return Err(Failure::NotFound);
    }
    let kinds = inspector.memories.kinds(&namespace).await?;
    let grants: Vec<_> = inspector
        .memories
        .grants(&namespace)
        .await?
        .into_iter()
        .filter(|g| match &viewer.grant {
            Grant::Admin => true,
            Grant::Scope(own) => own
                .subject()
                .is_some_and(|s| *s == g.owner || *s == g.grantee),
        })
        .collect();
    let subject_link = |subject: &str| format!("/s/{}/{}", segment(&ns), segment(subject));
    let visible = |subject: &str| Scope::new(ns.as_str(), subject).is_ok_and(|s| viewer.sees(&s));
    Ok(html_page(page(
        "Kinds and grants",
        Some(&viewer),
        &[
            (format!("/ns/{}", segment(&ns)), ns.clone()),
            (format!("/ns/{}/kinds", segment(&ns)), "kinds".into()),
        ],
        &html! {
            h2 { "Kinds" }
            @if kinds.is_empty() { p.muted { "No kinds registered." } }
            table {
                thead { tr { th { "Kind" } th { "Unique on" } th { "Schema" } } }
                tbody { @for kind in &kinds { tr {
                    td { (kind.name) } td { (kind.unique_on.join(", ")) }
                    td { details { summary { "JSON Schema" } (json(&kind.schema)) } }
                } } }
            }
            h2 { "Grants" }
            @if grants.is_empty() { p.muted { "No grants." } }
            table {
                thead { tr { th { "Owner" } th { "Readable by (view as)" } th { "Kinds" } th { "Tags" } } }
                tbody { @for g in &grants { tr {
                    td { @if visible(g.owner.as_str()) {
                        a href=(subject_link(g.owner.as_str())) { (g.owner.as_str()) } } @else { (g.owner.as_str()) } }
                    td { @if visible(g.grantee.as_str()) {
                        a href=(subject_link(g.grantee.as_str())) { (g.grantee.as_str()) } } @else { (g.grantee.as_str()) } }
                    td { (kinds_said(&g.kinds)) }
                    td { @for tag in &g.tags { span.tag { (tag) } } }
                } } }
            }
        },
    )))
}

/// Any other path.
pub async fn not_found() -> Response {
    Failure::NotFound.into_response()
}
