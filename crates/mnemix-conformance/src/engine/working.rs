//! Working memory through the engine: its tools and schema.

use mnemix_engine::config::WorkingMemoryScope;
use mnemix_engine::Memory;
use serde_json::json;

use crate::support::{conversation, ResultExt};
use crate::Ctx;

use super::{config, memory};

/// The working-memory tools validate against the configured JSON Schema, and `prepare`
/// returns the document with its schema, per conversation or per user.
pub async fn working_memory_tools_follow_the_schema(ctx: &Ctx) {
    let schema = json!({
        "type": "object",
        "properties": {"name": {"type": "string"}, "plan": {"enum": ["free", "pro"]}},
        "required": ["name"],
        "additionalProperties": false,
    });
    let mut config = config();
    config.working_memory.enabled = true;
    config.working_memory.json_schema = Some(schema.clone());
    let memory = memory(ctx, config.clone());
    let c = conversation(ctx, ctx.scope()).await;

    let tools = memory.working_memory_tools();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "get_working_memory",
            "update_working_memory",
            "clear_working_memory"
        ]
    );
    assert_eq!(tools[1].parameters["properties"]["content"], schema);

    let call = |name: &'static str, arguments: serde_json::Value| {
        memory.call_working_memory_tool(ctx.scope(), &c.id, name, arguments)
    };
    assert_eq!(
        call("get_working_memory", json!({})).await.must("get"),
        json!(null)
    );
    call(
        "update_working_memory",
        json!({"content": {"plan": "gold"}}),
    )
    .await
    .must_be_invalid("a document against the schema");
    call("update_working_memory", json!({"content": "not json"}))
        .await
        .must_be_invalid("a document that is not JSON");
    call("forget_everything", json!({}))
        .await
        .must_be_invalid("an unknown tool");
    let stored = call(
        "update_working_memory",
        json!({"content": {"name": "Ada", "plan": "pro"}}),
    )
    .await
    .must("update");
    assert_eq!(stored["revision"], 1);
    assert_eq!(stored["format"], "json");

    let context = memory.prepare(ctx.scope(), &c.id, "").await.must("prepare");
    let block = context.working_memory.expect("working memory is on");
    let document = block.document.expect("a document");
    let parsed: serde_json::Value = serde_json::from_str(&document.content).expect("JSON");
    assert_eq!(parsed, json!({"name": "Ada", "plan": "pro"}));
    assert_eq!(block.json_schema, Some(schema));

    // Per user: another conversation of the subject shares the document.
    config.working_memory.scope = WorkingMemoryScope::User;
    let per_user = Memory::builder(ctx.backend_arc())
        .config(config)
        .build()
        .must("build");
    let other = conversation(ctx, ctx.scope()).await;
    per_user
        .update_working_memory(ctx.scope(), &c.id, json!({"name": "Grace"}))
        .await
        .must("update per user");
    let seen = per_user
        .get_working_memory(ctx.scope(), &other.id)
        .await
        .must("get per user")
        .expect("shared by the user's conversations");
    assert!(seen.content.contains("Grace"));
    assert_eq!(
        call("clear_working_memory", json!({})).await.must("clear"),
        json!({"cleared": true})
    );
}
