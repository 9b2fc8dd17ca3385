//! The one definition of lexical recall that every backend matches exactly.
//!
//! - The text is first brought to Unicode normalisation form NFKC, so composed and decomposed
//!   accents (`café` as `e` + U+0301 or as `é`), full-width forms and ligatures (`ﬁ`) compare
//!   equal.
//! - Tokens are maximal runs of Unicode alphanumeric characters ([`char::is_alphanumeric`]),
//!   lowercased ([`str::to_lowercase`]: case folding by the full lowercase mapping, so `É` is
//!   `é`; `ß` stays `ß` and does not match `ss`), then NFC again (lowercasing can decompose),
//!   kept when at least 3 characters long.
//! - A fact matches when it shares at least one token with the query.
//! - Relevance = matched distinct query tokens / distinct query tokens.
//! - Order: relevance descending, fact score descending (no score last), `created_at`
//!   descending, id ascending.

use std::collections::BTreeSet;

use unicode_normalization::UnicodeNormalization;

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
    let normalised: String = text.nfkc().collect();
    normalised
        .split(|c: char| !c.is_alphanumeric())
        .filter(|run| !run.is_empty())
        .map(|run| run.to_lowercase().nfc().collect::<String>())
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
    fn every_normal_form_and_case_is_one_token() {
        let composed = tokenize("CAFÉ ﬁnance ｆｕｌｌ");
        for text in [
            "cafe\u{301} finance full",
            "café FINANCE Ｆｕｌｌ",
            "Cafe\u{301} ﬁnance full",
        ] {
            assert_eq!(tokenize(text), composed, "{text}");
        }
        assert!(composed.contains("café") && composed.contains("finance"));
    }

    #[test]
    fn relevance_counts_distinct_query_tokens() {
        let q = tokenize("deploy deploy region");
        assert!((relevance(&q, &tokenize("deploy to region")) - 1.0).abs() < f64::EPSILON);
        assert!((relevance(&q, &tokenize("deploy now")) - 0.5).abs() < f64::EPSILON);
        assert!(relevance(&tokenize("an"), &tokenize("an")).abs() < f64::EPSILON);
    }
}
