//! The MCP tools: one scope's facts, structured memories, search, working memory and
//! conversations.
//!
//! The scope is never an argument. Over stdio it is the server's (`--namespace`, `--subject`);
//! over HTTP it is the bearer key's, put on the request by the authentication layer as a
//! [`Tenant`]. So whatever a prompt makes the model send, it reaches one tenant's memory.

use std::sync::Arc;

use mnemix::engine::{Memories, MemoryQuery, NewMemory, SearchScope};
use mnemix_core::embed::Embedder;
use mnemix_core::{
    ConversationId, FactId, MemoryError, Origin, Principal, Scope, Scoped, Store, Timestamp,
    VectorQuery, WorkingMemory, WorkingMemoryKey, WorkingMemoryUpdate,
};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, Implementation, ServerCapabilities, ServerConfig};
use rmcp::service::RequestContext;
use rmcp::{schemars, tool, tool_handler, tool_router, ErrorData, RoleServer, ServerHandler};
use serde::Deserialize;
use serde_json::{json, Value};

/// The collection the engine embeds conversation messages into (semantic search reads it).
pub const MESSAGES_COLLECTION: &str = "messages";

/// The scope an authenticated HTTP request works in, and the key's principal, which what it
/// writes records as its writer.
#[derive(Debug, Clone)]
pub struct Tenant(pub Scope, pub Principal);

/// Where the scope of a call comes from.
#[derive(Debug, Clone)]
pub enum ScopeSource {
    /// The server's own (stdio).
    Fixed(Scope),
    /// The request's credential ([`Tenant`], HTTP).
    Credential,
}

/// The memory as MCP tools.
#[derive(Clone)]
pub struct MemoryTools {
    store: Store,
    memories: Arc<Memories>,
    embedder: Arc<dyn Embedder>,
    scope: ScopeSource,
    tool_router: ToolRouter<Self>,
}

impl MemoryTools {
    /// Tools over `store`, embedding with `embedder`, in the scope `scope` gives.
    pub fn new(store: Store, embedder: Arc<dyn Embedder>, scope: ScopeSource) -> Self {
        Self {
            memories: Arc::new(Memories::new(store.backend())),
            store,
            embedder,
            scope,
            tool_router: Self::tool_router(),
        }
    }

    /// The caller's scope, through the store writing as the caller: the server's own for
    /// stdio (the command line), the key's for HTTP. Nothing in a tool's arguments names either.
    fn scoped(&self, context: &RequestContext<RoleServer>) -> Result<Scoped, ErrorData> {
        let (scope, writer) = match &self.scope {
            ScopeSource::Fixed(scope) => (scope.clone(), Principal::command()),
            ScopeSource::Credential => context
                .extensions
                .get::<http::request::Parts>()
                .and_then(|parts| parts.extensions.get::<Tenant>())
                .map(|tenant| (tenant.0.clone(), tenant.1.clone()))
                .ok_or_else(|| ErrorData::invalid_request("no credential on the request", None))?,
        };
        Ok(self.store.acting_as(writer).at(scope))
    }

    async fn embed(&self, text: &str) -> Result<Vec<f32>, MemoryError> {
        let mut vectors = self.embedder.embed(&[text.to_owned()]).await?;
        vectors
            .pop()
            .ok_or_else(|| MemoryError::invalid("the embedder returned nothing"))
    }
}

/// A tool's answer: a JSON object for the model, or the error it can act on. (A store error is
/// the model's to read, not a protocol error; the `Result` is the tool methods' return type.)
#[allow(clippy::unnecessary_wraps)]
fn answer(result: Result<Value, MemoryError>) -> Result<CallToolResult, ErrorData> {
    Ok(match result {
        Ok(value) => CallToolResult::structured(value),
        Err(error) => CallToolResult::structured_error(json!({
            "error": error.to_string(),
            "kind": error_kind(&error),
        })),
    })
}

fn error_kind(error: &MemoryError) -> &'static str {
    match error {
        MemoryError::NotFound { .. } => "not_found",
        MemoryError::InvalidInput(_) => "invalid_input",
        MemoryError::Conflict { .. } => "conflict",
        MemoryError::AlreadyExists { .. } => "already_exists",
        _ => "backend",
    }
}

/// A fact as tools answer it. `written_by` is `kind:id`, as `recall`'s `written_by` takes it;
/// a key's label is beside it.
fn fact_json(fact: &mnemix_core::Fact) -> Value {
    let mut writer = fact.provenance.written_by.clone();
    let label = writer.label.take();
    json!({
        "id": fact.id.as_str(),
        "text": fact.text,
        "kind": fact.kind,
        "key": fact.key,
        "tags": fact.tags,
        "created_at": fact.created_at,
        "written_by": writer.to_string(),
        "writer_label": label,
        "origin": fact.provenance.origin.to_string(),
        "valid_from": fact.valid_from,
        "valid_until": fact.valid_until,
    })
}

/// A `YYYY-MM-DD` argument.
fn date(text: Option<&str>) -> Result<Option<Timestamp>, MemoryError> {
    text.map(Timestamp::from_date).transpose()
}

/// Every string of a list argument parsed, or the first one's error.
fn parsed<T: std::str::FromStr<Err = MemoryError>>(
    texts: &[String],
) -> Result<Vec<T>, MemoryError> {
    texts.iter().map(|t| t.parse()).collect()
}

/// `"created"`, `"duplicate"` or `{"superseded": previous id}`.
fn status_json(status: &mnemix_core::RememberStatus) -> Value {
    match status {
        mnemix_core::RememberStatus::Created => json!("created"),
        mnemix_core::RememberStatus::Duplicate => json!("duplicate"),
        mnemix_core::RememberStatus::Superseded { previous } => {
            json!({"superseded": previous.as_str()})
        }
    }
}

fn working_json(memory: Option<WorkingMemory>) -> Value {
    json!({
        "working_memory": memory.map(|m| json!({
            "content": m.content,
            "format": m.format.as_str(),
            "revision": m.revision,
            "updated_at": m.updated_at,
        }))
    })
}

fn working_key(conversation_id: Option<String>) -> Result<WorkingMemoryKey, MemoryError> {
    conversation_id.map_or(Ok(WorkingMemoryKey::User), |id| {
        ConversationId::new(id).map(WorkingMemoryKey::Conversation)
    })
}

/// Arguments of `remember`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RememberArgs {
    /// The fact, as one self-contained sentence ("Prefers tea to coffee").
    pub text: String,
    /// What sort of fact it is (`preference`, `profile`, …); recall can filter by it.
    #[serde(default)]
    #[schemars(with = "String")]
    pub kind: Option<String>,
    /// A stable key ("favourite_drink"): a new fact with the same key supersedes the current
    /// one, which stays in history.
    #[serde(default)]
    #[schemars(with = "String")]
    pub key: Option<String>,
    /// Tags recall can filter by.
    #[serde(default)]
    pub tags: Vec<String>,
    /// When it became true in the world, YYYY-MM-DD (omit when not said).
    #[serde(default)]
    #[schemars(with = "String", regex(pattern = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$"))]
    pub valid_from: Option<String>,
    /// When it stopped being true in the world, YYYY-MM-DD (omit when not said).
    #[serde(default)]
    #[schemars(with = "String", regex(pattern = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$"))]
    pub valid_until: Option<String>,
}

/// Arguments of `recall`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RecallArgs {
    /// What to recall, in words.
    pub query: String,
    /// How many facts at most (default 5).
    #[serde(default)]
    #[schemars(with = "u32", range(min = 1, max = 1000))]
    pub limit: Option<usize>,
    /// Only facts of this kind.
    #[serde(default)]
    #[schemars(with = "String")]
    pub kind: Option<String>,
    /// Only facts carrying every one of these tags.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Only facts from these origins, as the server recorded them: `api`, `user`,
    /// `assistant`, `extracted`, `tool`, `imported`, `unrecorded` (omit: every origin).
    #[serde(default)]
    pub origins: Vec<String>,
    /// Only facts written by these writers, `kind` or `kind:id` as answers name them
    /// (`key:0123abcd…`, `extractor:model`, `command`; omit: every writer).
    #[serde(default)]
    pub written_by: Vec<String>,
    /// What was true in the world on this date, YYYY-MM-DD (omit: what is true now).
    #[serde(default)]
    #[schemars(with = "String", regex(pattern = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$"))]
    pub as_of: Option<String>,
}

/// Arguments of `forget`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ForgetArgs {
    /// The fact's id, as `remember` or `recall` gave it.
    pub id: String,
}

/// How `search_memory` ranks.
#[derive(Debug, Clone, Copy, Default, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SearchMode {
    /// By shared words (facts).
    Lexical,
    /// By meaning, with the server's embedder (facts, and conversation messages the agent's
    /// engine embedded).
    #[default]
    Semantic,
}

/// Arguments of `search_memory`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchArgs {
    /// What to look for.
    pub query: String,
    /// `lexical` or `semantic` (default).
    #[serde(default)]
    pub mode: SearchMode,
    /// How many results at most (default 10).
    #[serde(default)]
    #[schemars(with = "u32", range(min = 1, max = 1000))]
    pub limit: Option<usize>,
}

/// Arguments of `list_memory_kinds`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListKindsArgs {}

/// Arguments of `store_memory`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StoreMemoryArgs {
    /// A kind `list_memory_kinds` names.
    pub kind: String,
    /// The memory: a JSON object following the kind's schema.
    #[schemars(with = "serde_json::Map<String, Value>")]
    pub data: Value,
    /// For a kind without unique fields: the id of the memory to update (omit to create).
    #[serde(default)]
    #[schemars(with = "String")]
    pub id: Option<String>,
    /// Tags searches can filter by.
    #[serde(default)]
    pub tags: Vec<String>,
    /// How sure you are, from 0 to 1.
    #[serde(default)]
    #[schemars(with = "f32", range(min = 0.0, max = 1.0))]
    pub confidence: Option<f32>,
    /// How long it lasts: "30s", "15m", "1h", "7d" (omit: until forgotten).
    #[serde(default)]
    #[schemars(with = "String", regex(pattern = r"^0*[1-9][0-9]*[smhd]$"))]
    pub ttl: Option<String>,
    /// When it became true in the world, YYYY-MM-DD (omit when not said).
    #[serde(default)]
    #[schemars(with = "String", regex(pattern = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$"))]
    pub valid_from: Option<String>,
    /// When it stopped being true in the world, YYYY-MM-DD (omit when not said).
    #[serde(default)]
    #[schemars(with = "String", regex(pattern = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$"))]
    pub valid_until: Option<String>,
}

/// Whose memories `search_memories` looks in.
#[derive(Debug, Clone, Copy, Default, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum MemoriesScope {
    /// The agent's own.
    Own,
    /// What other agents granted it.
    Shared,
    /// Both.
    #[default]
    All,
}

/// Arguments of `search_memories`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchMemoriesArgs {
    /// What to look for, in words.
    pub query: String,
    /// Only memories of this kind.
    #[serde(default)]
    #[schemars(with = "String")]
    pub kind: Option<String>,
    /// Only memories carrying every one of these tags.
    #[serde(default)]
    pub tags: Vec<String>,
    /// `own`, `shared` (what other agents granted) or `all` (default).
    #[serde(default)]
    pub scope: MemoriesScope,
    /// How many at most (default 10).
    #[serde(default)]
    #[schemars(with = "u32", range(min = 1, max = 1000))]
    pub limit: Option<usize>,
}

/// Arguments of `get_working_memory`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GetWorkingMemoryArgs {
    /// A conversation's own document; without it, the user's document.
    #[serde(default)]
    #[schemars(with = "String")]
    pub conversation_id: Option<String>,
}

/// Arguments of `update_working_memory`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateWorkingMemoryArgs {
    /// The whole new document, in Markdown (it replaces the old one).
    pub content: String,
    /// A conversation's own document; without it, the user's document.
    #[serde(default)]
    #[schemars(with = "String")]
    pub conversation_id: Option<String>,
    /// Apply only if the document is still at this revision (from `get_working_memory`), so
    /// two agents never overwrite each other unknowingly.
    #[serde(default)]
    #[schemars(with = "u64")]
    pub expected_revision: Option<u64>,
}

/// Arguments of `list_conversations`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListConversationsArgs {
    /// How many at most (default 20).
    #[serde(default)]
    #[schemars(with = "u32", range(min = 1, max = 1000))]
    pub limit: Option<usize>,
    /// The `next_cursor` of the previous page.
    #[serde(default)]
    #[schemars(with = "String")]
    pub cursor: Option<String>,
}

/// Arguments of `show_conversation`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShowConversationArgs {
    /// The conversation's id, as `list_conversations` gave it.
    pub conversation_id: String,
    /// Only the last N messages (default 50).
    #[serde(default)]
    #[schemars(with = "u32", range(min = 1, max = 1000))]
    pub last: Option<usize>,
}

#[tool_router]
impl MemoryTools {
    /// Stores a fact about the user.
    #[tool(
        description = "Remember a fact about the user for later conversations. Returns the fact's id and whether it was new, a duplicate, or superseded an older fact with the same key.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    pub async fn remember(
        &self,
        Parameters(args): Parameters<RememberArgs>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let scoped = self.scoped(&context)?;
        answer(
            async {
                let embedding = self.embed(&args.text).await?;
                let mut remember = scoped
                    .facts()
                    .remember(args.text)
                    .tags(args.tags)
                    .embedding(embedding);
                if let Some(kind) = args.kind {
                    remember = remember.kind(kind);
                }
                if let Some(key) = args.key {
                    remember = remember.key(key);
                }
                if let Some(at) = date(args.valid_from.as_deref())? {
                    remember = remember.valid_from(at);
                }
                if let Some(at) = date(args.valid_until.as_deref())? {
                    remember = remember.valid_until(at);
                }
                let outcome = remember.await?;
                Ok(json!({"fact": fact_json(&outcome.fact), "status": status_json(&outcome.status)}))
            }
            .await,
        )
    }

    /// The facts most relevant to a query.
    #[tool(
        description = "Recall the facts about the user most relevant to a query, best first, ranked by words and meaning together.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    pub async fn recall(
        &self,
        Parameters(args): Parameters<RecallArgs>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let scoped = self.scoped(&context)?;
        answer(
            async {
                let vector = self.embed(&args.query).await?;
                let mut recall = scoped
                    .facts()
                    .recall(args.query)
                    .vector(vector)
                    .tags(args.tags)
                    .limit(args.limit.unwrap_or(5));
                if let Some(kind) = args.kind {
                    recall = recall.kind(kind);
                }
                if !args.origins.is_empty() {
                    let origins: Vec<Origin> = parsed(&args.origins)?;
                    recall = recall.origins(origins);
                }
                if !args.written_by.is_empty() {
                    let writers: Vec<Principal> = parsed(&args.written_by)?;
                    recall = recall.written_by(writers);
                }
                if let Some(at) = date(args.as_of.as_deref())? {
                    recall = recall.as_of(at);
                }
                let facts: Vec<Value> = recall
                    .await?
                    .iter()
                    .map(|hit| {
                        let mut fact = fact_json(&hit.fact);
                        fact["relevance"] = json!(hit.relevance);
                        fact
                    })
                    .collect();
                Ok(json!({ "facts": facts }))
            }
            .await,
        )
    }

    /// Deletes one fact.
    #[tool(
        description = "Forget one fact by id. Returns whether it existed (an unknown id is not an error).",
        annotations(
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    pub async fn forget(
        &self,
        Parameters(args): Parameters<ForgetArgs>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let scoped = self.scoped(&context)?;
        answer(
            async {
                let id = FactId::new(args.id)?;
                Ok(json!({ "forgotten": scoped.facts().forget(&id).await? }))
            }
            .await,
        )
    }

    /// Searches facts (and, by meaning, embedded messages).
    #[tool(
        description = "Search the user's memory. `lexical` matches words in facts; `semantic` (default) matches meaning in facts and in conversation messages. Each result says its source (fact or message).",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    pub async fn search_memory(
        &self,
        Parameters(args): Parameters<SearchArgs>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let scoped = self.scoped(&context)?;
        answer(self.search(&scoped, args).await)
    }

    /// The kinds of structured memory registered in the namespace.
    #[tool(
        description = "List the kinds of structured memory you can store: each kind's name, the JSON Schema its data follows, and the fields that identify one memory (a new memory with the same values replaces it).",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    pub async fn list_memory_kinds(
        &self,
        Parameters(_args): Parameters<ListKindsArgs>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let scoped = self.scoped(&context)?;
        answer(
            async {
                let kinds = self.memories.kinds(scoped.scope().namespace()).await?;
                Ok(json!({ "kinds": kinds }))
            }
            .await,
        )
    }

    /// Stores a structured memory.
    #[tool(
        description = "Store a structured memory: a kind from list_memory_kinds and data following its schema. Returns the memory's id and whether it was created, a duplicate, or superseded the memory with the same identifying values.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    pub async fn store_memory(
        &self,
        Parameters(args): Parameters<StoreMemoryArgs>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let scoped = self.scoped(&context)?;
        answer(
            async {
                let ttl = args.ttl.as_deref().map(str::parse).transpose()?;
                let embedding = self
                    .embed(&mnemix_core::registry::canonical_json(&args.data))
                    .await?;
                let memory = NewMemory {
                    id: args.id,
                    tags: args.tags,
                    confidence: args.confidence,
                    ttl,
                    embedding: Some(embedding),
                    valid_from: date(args.valid_from.as_deref())?,
                    valid_until: date(args.valid_until.as_deref())?,
                    ..NewMemory::new(args.kind, args.data)
                };
                let outcome = self
                    .memories
                    .through(scoped.store().backend())
                    .store(scoped.scope(), memory)
                    .await?;
                Ok(json!({"memory": outcome.memory, "status": status_json(&outcome.status)}))
            }
            .await,
        )
    }

    /// Searches structured memories, own and shared.
    #[tool(
        description = "Search structured memories by words and meaning: your own, those other agents shared with you, or both (default). Each result has the memory's kind, data, relevance, confidence, whether it is the latest version, and its source.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    pub async fn search_memories(
        &self,
        Parameters(args): Parameters<SearchMemoriesArgs>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let scoped = self.scoped(&context)?;
        answer(
            async {
                let scope = match args.scope {
                    MemoriesScope::All => SearchScope::All,
                    MemoriesScope::Own => SearchScope::Own,
                    MemoriesScope::Shared => SearchScope::Shared,
                };
                let mut query = MemoryQuery::default()
                    .with_vector(self.embed(&args.query).await?)
                    .with_text(args.query)
                    .with_tags(args.tags)
                    .with_limit(args.limit)
                    .with_scope(scope);
                query.kind = args.kind;
                let hits = self.memories.search(scoped.scope(), query).await?;
                Ok(json!({ "memories": hits }))
            }
            .await,
        )
    }

    /// The working-memory document.
    #[tool(
        description = "Read the working memory: a Markdown document of durable context about the user (or about one conversation), with its revision.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    pub async fn get_working_memory(
        &self,
        Parameters(args): Parameters<GetWorkingMemoryArgs>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let scoped = self.scoped(&context)?;
        answer(
            async {
                let key = working_key(args.conversation_id)?;
                let memory = scoped
                    .store()
                    .get_working_memory(scoped.scope(), &key)
                    .await?;
                Ok(working_json(memory))
            }
            .await,
        )
    }

    /// Replaces the working-memory document.
    #[tool(
        description = "Replace the working memory with an updated Markdown document (the whole document, not a diff). Give expected_revision to refuse overwriting someone else's newer update.",
        annotations(
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    pub async fn update_working_memory(
        &self,
        Parameters(args): Parameters<UpdateWorkingMemoryArgs>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let scoped = self.scoped(&context)?;
        answer(
            async {
                let key = working_key(args.conversation_id)?;
                let mut update = WorkingMemoryUpdate::markdown(args.content);
                update.expected_revision = args.expected_revision;
                let stored = scoped
                    .store()
                    .set_working_memory(scoped.scope(), &key, update)
                    .await?;
                Ok(working_json(Some(stored)))
            }
            .await,
        )
    }

    /// The user's conversations.
    #[tool(
        description = "List the user's conversations, most recently created first, with title, agent and message count; page with next_cursor.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    pub async fn list_conversations(
        &self,
        Parameters(args): Parameters<ListConversationsArgs>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let scoped = self.scoped(&context)?;
        answer(
            async {
                let mut list = scoped.conversations().limit(args.limit.unwrap_or(20));
                if let Some(cursor) = args.cursor {
                    list = list.cursor(cursor);
                }
                let page = list.await?;
                let conversations: Vec<Value> = page
                    .items
                    .iter()
                    .map(|c| {
                        json!({
                            "id": c.id.as_str(),
                            "title": c.title,
                            "agent": c.agent,
                            "messages": c.last_seq,
                            "created_at": c.created_at,
                            "updated_at": c.updated_at,
                        })
                    })
                    .collect();
                Ok(json!({"conversations": conversations, "next_cursor": page.next_cursor}))
            }
            .await,
        )
    }

    /// One conversation's messages.
    #[tool(
        description = "Show the last messages of one conversation, oldest first, with role, text and sequence number.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    pub async fn show_conversation(
        &self,
        Parameters(args): Parameters<ShowConversationArgs>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let scoped = self.scoped(&context)?;
        answer(
            async {
                let id = ConversationId::new(args.conversation_id)?;
                let conversation = scoped.conversation(&id).get().await?;
                let messages = scoped
                    .conversation(&id)
                    .load()
                    .last(args.last.unwrap_or(50))
                    .await?;
                let messages: Vec<Value> = messages
                    .iter()
                    .map(|m| {
                        json!({
                            "seq": m.seq,
                            "role": m.message.role.as_str(),
                            "text": m.message.text(),
                            "created_at": m.message.created_at,
                        })
                    })
                    .collect();
                Ok(json!({
                    "id": conversation.id.as_str(),
                    "title": conversation.title,
                    "messages": messages,
                }))
            }
            .await,
        )
    }
}

impl MemoryTools {
    async fn search(&self, scoped: &Scoped, args: SearchArgs) -> Result<Value, MemoryError> {
        let limit = args.limit.unwrap_or(10);
        let mut results: Vec<(f64, Value)> = Vec::new();
        let facts = match args.mode {
            SearchMode::Lexical => scoped.facts().recall(args.query.clone()),
            SearchMode::Semantic => scoped
                .facts()
                .recall_similar(self.embed(&args.query).await?),
        };
        for hit in facts.limit(limit).await? {
            let mut fact = fact_json(&hit.fact);
            fact["source"] = json!("fact");
            fact["score"] = json!(hit.relevance);
            results.push((hit.relevance, fact));
        }
        if matches!(args.mode, SearchMode::Semantic) {
            let collections = scoped
                .store()
                .list_collections(scoped.scope().namespace())
                .await?;
            // Messages embedded by another model cannot be compared with this query's vector.
            let comparable = collections.iter().any(|spec| {
                spec.name == MESSAGES_COLLECTION
                    && spec.model == self.embedder.model_id()
                    && spec.dims == self.embedder.dims()
            });
            if comparable {
                let query = VectorQuery::new(self.embed(&args.query).await?, limit);
                let hits = scoped
                    .store()
                    .search(scoped.scope(), MESSAGES_COLLECTION, query)
                    .await?;
                for hit in hits {
                    let score = f64::from(hit.score);
                    results.push((
                        score,
                        json!({
                            "source": "message",
                            "id": hit.record.id.as_str(),
                            "text": hit.record.text,
                            "conversation_id": hit.record.conversation_id.as_ref().map(ConversationId::as_str),
                            "score": score,
                        }),
                    ));
                }
            }
        }
        results.sort_by(|a, b| b.0.total_cmp(&a.0));
        results.truncate(limit);
        Ok(json!({"results": results.into_iter().map(|(_, r)| r).collect::<Vec<_>>()}))
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for MemoryTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(
                "mnemix",
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions(
                "Long-term memory of one user: facts (remember, recall, forget, search_memory), \
                 structured memories of registered kinds (list_memory_kinds, store_memory, \
                 search_memories), a working-memory document (get_working_memory, update_working_memory) and past \
                 conversations (list_conversations, show_conversation). Recall before answering \
                 questions about the user; remember what they tell you about themselves.",
            )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tool_says_whether_it_reads_or_writes_and_what_a_write_does() {
        let tools = MemoryTools::tool_router().list_all();
        assert_eq!(tools.len(), 11);
        for tool in tools {
            let annotations = tool
                .annotations
                .as_ref()
                .unwrap_or_else(|| panic!("{} has no annotations", tool.name));
            assert_eq!(annotations.open_world_hint, Some(false), "{}", tool.name);
            let reads = annotations
                .read_only_hint
                .unwrap_or_else(|| panic!("{} says not whether it reads", tool.name));
            let reader = ["recall", "search", "list", "get", "show"]
                .iter()
                .any(|verb| tool.name.starts_with(verb));
            assert_eq!(reads, reader, "{}", tool.name);
            if !reads {
                assert!(annotations.destructive_hint.is_some(), "{}", tool.name);
                assert!(annotations.idempotent_hint.is_some(), "{}", tool.name);
            }
        }
    }

    /// Every `type` of a schema, at any depth.
    fn types(schema: &Value, found: &mut Vec<Value>) {
        match schema {
            Value::Object(map) => {
                if let Some(kind) = map.get("type") {
                    found.push(kind.clone());
                }
                map.values().for_each(|v| types(v, found));
            }
            Value::Array(items) => items.iter().for_each(|v| types(v, found)),
            _ => {}
        }
    }

    #[test]
    fn the_input_schemas_say_what_the_server_accepts_in_plain_types() {
        let tools = MemoryTools::tool_router().list_all();
        let schema_of = |name: &str| {
            let tool = tools.iter().find(|t| t.name == name).expect("a tool");
            Value::Object(tool.input_schema.as_ref().clone())
        };
        for tool in &tools {
            let mut found = Vec::new();
            types(
                &Value::Object(tool.input_schema.as_ref().clone()),
                &mut found,
            );
            // A nullable field as `["string", "null"]` is refused by some model dialects:
            // optional fields are left out of `required` instead.
            assert!(
                found.iter().all(Value::is_string),
                "{}: {found:?}",
                tool.name
            );
        }
        let store = schema_of("store_memory");
        let field = |name: &str| store["properties"][name].clone();
        assert_eq!(field("data")["type"], "object");
        assert_eq!(
            (
                field("confidence")["minimum"].as_f64(),
                field("confidence")["maximum"].as_f64()
            ),
            (Some(0.0), Some(1.0))
        );
        let ttl = field("ttl")["pattern"]
            .as_str()
            .expect("a pattern")
            .to_owned();
        assert_eq!(ttl, "^0*[1-9][0-9]*[smhd]$");
        assert_eq!(store["required"], json!(["kind", "data"]));
        let search = schema_of("search_memories");
        let scope = serde_json::to_string(&search).unwrap();
        assert!(
            scope.contains("\"own\"") && scope.contains("\"shared\"") && scope.contains("\"all\""),
            "{scope}"
        );
        let recall = schema_of("recall");
        assert_eq!(
            recall["properties"]["limit"]["maximum"].as_f64(),
            Some(1000.0)
        );
        // What the schema allows, the server takes; what it refuses, the server refuses.
        for ttl in ["30s", "15m", "1h", "7d"] {
            assert!(ttl.parse::<mnemix_core::Ttl>().is_ok(), "{ttl}");
        }
        for ttl in ["0s", "1w", "s", "-1h"] {
            assert!(ttl.parse::<mnemix_core::Ttl>().is_err(), "{ttl}");
        }
    }
}
