//! The pages' frame and the small pieces every page draws with. maud escapes every value put
//! into the markup, so memory text (which an attacker may have planted) is always text; links
//! are built here from ids, percent-encoded, and always start with `/`.

use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use maud::{html, Markup, DOCTYPE};
use mnemix_core::{Part, StoredMessage, Timestamp};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

use super::access::{Viewer, CSRF_FIELD};
use crate::mcp::Grant;

/// Everything but the characters an id may keep in a path segment.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'.');

/// One path segment, percent-encoded.
pub fn segment(text: &str) -> String {
    utf8_percent_encode(text, SEGMENT).to_string()
}

/// A query string from its pairs, empty values left out.
pub fn query(pairs: &[(&str, &str)]) -> String {
    let kept: Vec<_> = pairs.iter().filter(|(_, v)| !v.is_empty()).collect();
    if kept.is_empty() {
        return String::new();
    }
    format!("?{}", serde_urlencoded::to_string(kept).unwrap_or_default())
}

/// A page in the inspector's frame.
pub fn page(
    title: &str,
    viewer: Option<&Viewer>,
    trail: &[(String, String)],
    body: &Markup,
) -> Html<String> {
    Html(
        html! {
            (DOCTYPE)
            html lang="en" {
                head {
                    meta charset="utf-8";
                    meta name="viewport" content="width=device-width, initial-scale=1";
                    title { (title) " · mnemix" }
                    link rel="stylesheet" href="/static/style.css";
                }
                body {
                    header {
                        nav {
                            a.brand href="/" { "mnemix" }
                            @for (href, label) in trail {
                                span.sep { "/" }
                                a href=(href) { (label) }
                            }
                        }
                        @if let Some(viewer) = viewer {
                            div.who {
                                span { (match &viewer.grant {
                                    Grant::Admin => "admin".to_owned(),
                                    Grant::Scope(scope) => scope.to_string(),
                                }) }
                                @if viewer.logged_in {
                                    form method="post" action="/logout" {
                                        (csrf(viewer))
                                        button type="submit" { "Log out" }
                                    }
                                }
                            }
                        }
                    }
                    main {
                        h1 { (title) }
                        (body)
                    }
                }
            }
        }
        .into_string(),
    )
}

/// The hidden field carrying the session's CSRF token.
pub fn csrf(viewer: &Viewer) -> Markup {
    html! { input type="hidden" name=(CSRF_FIELD) value=(viewer.csrf); }
}

/// The login page.
pub fn login(error: Option<&str>) -> Html<String> {
    page(
        "Log in",
        None,
        &[],
        &html! {
            p { "Log in with a key of this server's key file (made with "
                code { "mnemix mcp key" } "). A key for one subject sees that subject only; "
                "an admin key every namespace." }
            @if let Some(error) = error { p.error { (error) } }
            form.login method="post" action="/login" {
                label { "Key " input type="password" name="key" autocomplete="off" required autofocus; }
                button type="submit" { "Log in" }
            }
        },
    )
}

/// A refusal or failure as a page.
pub fn refusal(status: StatusCode, message: &str) -> Response {
    let title = status.canonical_reason().unwrap_or("Error");
    (
        status,
        page(title, None, &[], &html! { p.error { (message) } }),
    )
        .into_response()
}

/// `GET /static/style.css`.
pub async fn stylesheet() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "max-age=3600"),
        ],
        include_str!("style.css"),
    )
        .into_response()
}

/// A timestamp as people read it (UTC, to the second).
pub fn when(at: Timestamp) -> String {
    let (year, month, day) = at.utc_date();
    let seconds = at.as_millis().div_euclid(1000).rem_euclid(24 * 60 * 60);
    format!(
        "{year}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        seconds / 3600,
        seconds / 60 % 60,
        seconds % 60
    )
}

/// A JSON value, indented.
pub fn json(value: &serde_json::Value) -> Markup {
    html! { pre.json { (serde_json::to_string_pretty(value).unwrap_or_default()) } }
}

/// A message's parts: text as text, tool calls and results with their JSON.
pub fn parts(message: &StoredMessage) -> Markup {
    html! {
        @for part in &message.message.parts {
            @match part {
                Part::Text { text } => { p.text { (text) } }
                Part::ToolCall { call_id, name, arguments } => {
                    div.tool {
                        span.label { "tool call " b { (name) } " · " (call_id) }
                        (json(arguments))
                    }
                }
                Part::ToolResult { call_id, output, is_error } => {
                    div.tool.(if *is_error { "failed" } else { "" }) {
                        span.label { "tool result · " (call_id) @if *is_error { " · error" } }
                        (json(output))
                    }
                }
                other => {
                    div.tool { (json(&serde_json::to_value(other).unwrap_or_default())) }
                }
            }
        }
    }
}

/// A "next page" link, when there is one.
pub fn next_page(href: Option<String>) -> Markup {
    html! {
        @if let Some(href) = href {
            p.pager { a href=(href) { "Next page →" } }
        }
    }
}
