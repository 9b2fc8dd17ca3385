//! Unit tests of the model: validation, serde shapes, cursors, filters.

use mnemix_core::adapter::Cursor;
use mnemix_core::{
    ConversationId, Filter, MemoryError, Message, Namespace, Part, Role, Scope, Subject, Timestamp,
};
use serde_json::json;

#[test]
fn namespace_follows_its_pattern() {
    for ok in [
        "a",
        "default",
        "support-bot-2",
        &format!("a{}", "b".repeat(62)),
    ] {
        assert!(Namespace::new(ok).is_ok(), "{ok}");
    }
    for bad in [
        "",
        "A",
        "1abc",
        "-a",
        "a_b",
        "a b",
        "ä",
        &format!("a{}", "b".repeat(63)),
    ] {
        assert!(Namespace::new(bad).unwrap_err().is_invalid_input(), "{bad}");
    }
}

#[test]
fn identifiers_reject_empty_nul_and_oversized() {
    assert!(Subject::new("user-42").is_ok());
    assert!(Subject::new("x".repeat(256)).is_ok());
    for bad in [String::new(), "a\0b".into(), "x".repeat(257)] {
        assert!(ConversationId::new(bad).is_err());
    }
}

#[test]
fn scope_deserialization_validates() {
    let ok: Scope = serde_json::from_value(json!({"namespace": "app", "subject": "u1"})).unwrap();
    assert_eq!(ok, Scope::new("app", "u1").unwrap());
    assert!(serde_json::from_value::<Scope>(json!({"namespace": "App", "subject": "u1"})).is_err());
    assert!(serde_json::from_value::<Scope>(json!({"namespace": "app", "subject": ""})).is_err());
    let shared: Scope =
        serde_json::from_value(json!({"namespace": "app", "subject": null})).unwrap();
    assert!(shared.subject().is_none());
    assert!(shared.require_subject("forget_all").is_err());
}

#[test]
fn messages_serialize_with_tagged_parts() {
    let m = Message {
        id: "m1".try_into().unwrap(),
        role: Role::Assistant,
        parts: vec![
            Part::text("hi"),
            Part::tool_call("c1", "search", json!({"q": "x"})),
        ],
        created_at: Timestamp::from_millis(5),
        metadata: serde_json::Map::new(),
    };
    let value = serde_json::to_value(&m).unwrap();
    assert_eq!(
        value,
        json!({"id": "m1", "role": "assistant", "created_at": 5, "parts": [
            {"type": "text", "text": "hi"},
            {"type": "tool_call", "call_id": "c1", "name": "search", "arguments": {"q": "x"}}
        ]})
    );
    assert_eq!(serde_json::from_value::<Message>(value).unwrap(), m);
}

#[test]
fn cursors_round_trip_and_reject_garbage() {
    let c = Cursor {
        created_at: Timestamp::from_millis(1_700_000_000_123),
        id: "a:b".into(),
    };
    assert_eq!(Cursor::decode(&c.encode()).unwrap(), c);
    for bad in ["", "x", "12", "12:", "abc:def"] {
        assert!(Cursor::decode(bad).is_err(), "{bad}");
    }
}

#[test]
fn filters_serialize_as_tagged_ast_and_validate() {
    let f = Filter::and([
        Filter::eq("lang", "en"),
        Filter::range("year").gte(2020).lt(2030),
    ]);
    let value = serde_json::to_value(&f).unwrap();
    assert_eq!(value["op"], "and");
    assert_eq!(
        value["filters"][1],
        json!({"op": "range", "path": ["year"], "gte": 2020.0, "lt": 2030.0})
    );
    assert_eq!(serde_json::from_value::<Filter>(value).unwrap(), f);
    assert!(f.validate().is_ok());
    let mut deep = Filter::exists("x");
    for _ in 0..40 {
        deep = Filter::not(deep);
    }
    assert!(deep.validate().is_err(), "nesting is bounded");
}

#[test]
fn only_unavailable_is_retryable() {
    let unavailable = MemoryError::Unavailable {
        backend: "x",
        source: "reset".into(),
    };
    assert!(unavailable.is_retryable());
    assert!(!MemoryError::Backend {
        backend: "x",
        source: "boom".into()
    }
    .is_retryable());
    assert!(!MemoryError::conflict("c", Some(3)).is_retryable());
    assert_eq!(MemoryError::conflict("c", Some(3)).current(), Some(3));
}

#[test]
fn stored_enum_names_parse_back() {
    use mnemix_core::{CheckpointStatus, Metric, WorkingMemoryFormat};
    for m in [Metric::Cosine, Metric::Dot, Metric::Euclidean] {
        assert_eq!(Metric::parse(m.as_str()), Some(m));
    }
    for s in [
        CheckpointStatus::Running,
        CheckpointStatus::Suspended,
        CheckpointStatus::Completed,
        CheckpointStatus::Failed,
    ] {
        assert_eq!(CheckpointStatus::parse(s.as_str()), Some(s));
    }
    for f in [WorkingMemoryFormat::Markdown, WorkingMemoryFormat::Json] {
        assert_eq!(WorkingMemoryFormat::parse(f.as_str()), Some(f));
    }
    assert_eq!(Metric::parse("manhattan"), None);
}
