//! The one definition of lexical recall that every backend matches exactly.
//!
//! - Tokens are maximal runs of Unicode alphanumeric characters ([`char::is_alphanumeric`]),
//!   lowercased ([`str::to_lowercase`]), kept when at least 3 characters long.
//! - A fact matches when it shares at least one token with the query.
//! - Relevance = matched distinct query tokens / distinct query tokens.
//! - Order: relevance descending, fact score descending (no score last), `created_at`
//!   descending, id ascending.

use std::collections::BTreeSet;

/// Shortest token kept, in characters.
pub const MIN_TOKEN_CHARS: usize = 3;

/// The distinct tokens of a text, sorted.
///
/// ```
/// use memory_core::lexical::tokenize;
/// let tokens: Vec<_> = tokenize("Project Foo deploys to fly.io, us-east!").into_iter().collect();
/// assert_eq!(tokens, ["deploys", "east", "fly", "foo", "project"]);
/// ```
pub fn tokenize(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|run| !run.is_empty())
        .map(str::to_lowercase)
        .filter(|token| token.chars().count() >= MIN_TOKEN_CHARS)
        .collect()
}

/// Relevance of a fact's tokens to the query's: the share of distinct query tokens it contains.
/// 0 when nothing is shared (or the query has no tokens).
pub fn relevance(query_tokens: &BTreeSet<String>, fact_tokens: &BTreeSet<String>) -> f64 {
    if query_tokens.is_empty() {
        return 0.0;
    }
    let matched = query_tokens.intersection(fact_tokens).count();
    matched as f64 / query_tokens.len() as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_unicode_lowercased_and_at_least_three_chars() {
        let t = tokenize("ÄRGER über Straße, an ОКНО 東京都 x1 ab abc");
        assert!(t.contains("ärger") && t.contains("über") && t.contains("straße"));
        assert!(t.contains("окно") && t.contains("東京都") && t.contains("abc"));
        assert!(!t.contains("an") && !t.contains("x1") && !t.contains("ab"));
    }

    #[test]
    fn relevance_counts_distinct_query_tokens() {
        let q = tokenize("deploy deploy region");
        assert!((relevance(&q, &tokenize("deploy to region")) - 1.0).abs() < f64::EPSILON);
        assert!((relevance(&q, &tokenize("deploy now")) - 0.5).abs() < f64::EPSILON);
        assert!(relevance(&tokenize("an"), &tokenize("an")).abs() < f64::EPSILON);
    }
}
