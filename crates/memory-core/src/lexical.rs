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
//! - Relevance is the IDF-weighted share of the distinct query tokens it holds, the weights taken
//!   over the matching facts ([`relevances`]): rare words of the question decide, common ones
//!   barely count. Holding every query token is relevance 1.
//! - Order: relevance descending, fact score descending (no score last), `created_at`
//!   descending, id ascending.
//!
//! No stemming and no stop-word list: both are language-specific, and the tokens are what every
//! backend indexes. The weighting does what a stop-word list would, in any language.

use std::collections::{BTreeSet, HashMap};

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
    if text.is_ascii() {
        // The same tokens without the Unicode passes: ASCII is its own NFKC and NFC, and its
        // alphanumerics and lowercase are ASCII's (most text a recall ranks).
        return text
            .split(|c: char| !c.is_ascii_alphanumeric())
            .filter(|run| run.len() >= MIN_TOKEN_CHARS)
            .map(str::to_ascii_lowercase)
            .collect();
    }
    unicode_tokens(text)
}

fn unicode_tokens(text: &str) -> BTreeSet<String> {
    let normalised: String = text.nfkc().collect();
    normalised
        .split(|c: char| !c.is_alphanumeric())
        .filter(|run| !run.is_empty())
        .map(|run| run.to_lowercase().nfc().collect::<String>())
        .filter(|token| token.chars().count() >= MIN_TOKEN_CHARS)
        .collect()
}

/// Relevance of each document (its distinct tokens) to the query's tokens, in `[0, 1]`: the
/// share of the query's weight that the document matches, each distinct query token weighted by
/// its inverse document frequency among the documents that match at all (those sharing at least
/// one token with the query):
///
/// `idf(t) = ln(1 + (n − df(t) + 0.5) / (df(t) + 0.5))`, `n` the matching documents, `df(t)`
/// those holding `t`; relevance = Σ idf of the query tokens a document holds ÷ Σ idf of all
/// query tokens. A document matching nothing has relevance 0; one holding every query token, 1.
///
/// Because the statistics are over the matching documents only, a backend may pass any superset
/// of them (a scope's candidates from its token index) and the relevances are the same. A word
/// most matches share ("what", "did", a name everyone says) weighs little; a rare one decides.
/// Sums run in query-token order, so every backend gets the same bits.
///
/// ```
/// use memory_core::lexical::{relevances, tokenize};
/// let documents = ["what did you paint", "what did you eat", "what did you read", "painted a lake"]
///     .map(tokenize);
/// let r = relevances(&tokenize("what did Caroline paint"), &documents);
/// assert!(r[0] > r[1] && (r[1] - r[2]).abs() < 1e-12, "{r:?}");
/// assert!(r[3].abs() < 1e-12, "no stemming: painted is not paint");
/// ```
pub fn relevances(query_tokens: &BTreeSet<String>, documents: &[BTreeSet<String>]) -> Vec<f64> {
    let held: Vec<Vec<usize>> = documents
        .iter()
        .map(|document| {
            query_tokens
                .iter()
                .enumerate()
                .filter(|(_, t)| document.contains(*t))
                .map(|(position, _)| position)
                .collect()
        })
        .collect();
    relevances_of_held(query_tokens.len(), &held)
}

/// [`relevances`] from what each document holds of the query, given as the ascending positions
/// (in the query's token order, that of [`tokenize`]'s set) of the query tokens it holds: what
/// a backend reads from its token index without the documents' text. `query_len` is the number
/// of distinct query tokens.
///
/// ```
/// use memory_core::lexical::{relevances, relevances_of_held, tokenize};
/// let query = tokenize("what did Caroline paint"); // caroline, did, paint, what
/// let documents = ["what did you paint", "what did you eat"].map(tokenize);
/// let held: [&[usize]; 2] = [&[1, 2, 3], &[1, 3]];
/// assert_eq!(relevances_of_held(query.len(), &held), relevances(&query, &documents));
/// ```
pub fn relevances_of_held<H: AsRef<[usize]>>(query_len: usize, held: &[H]) -> Vec<f64> {
    let n = held.iter().filter(|h| !h.as_ref().is_empty()).count() as f64;
    let mut df = vec![0_usize; query_len];
    for &position in held.iter().flat_map(AsRef::as_ref) {
        df[position] += 1;
    }
    let weights: Vec<f64> = df
        .iter()
        .map(|&df| {
            let df = df as f64;
            (1.0 + (n - df + 0.5) / (df + 0.5)).ln()
        })
        .collect();
    let total: f64 = weights.iter().sum();
    held.iter()
        .map(|held| {
            let matched: f64 = held
                .as_ref()
                .iter()
                .map(|&position| weights[position])
                .sum();
            if total > 0.0 {
                matched / total
            } else {
                0.0
            }
        })
        .collect()
}

/// The ascending positions, in `query_tokens`' order, of the query tokens a text holds (what
/// [`relevances_of_held`] takes for a document). To look in many texts for one query, make a
/// [`QueryTokens`] once.
///
/// ```
/// use memory_core::lexical::{held_positions, tokenize};
/// let query = tokenize("where does Foo deploy"); // deploy, does, foo, where
/// assert_eq!(held_positions(&query, "FOO deploys; where?"), [2, 3]);
/// ```
pub fn held_positions(query_tokens: &BTreeSet<String>, text: &str) -> Vec<usize> {
    QueryTokens::new(query_tokens).held_positions(text)
}

/// A query's distinct tokens, made ready to be looked for in many texts (the candidates a
/// ranking weighs): each of a text's words costs one hash lookup, and none of its other
/// tokens is allocated.
///
/// ```
/// use memory_core::lexical::{tokenize, QueryTokens};
/// let query = QueryTokens::new(&tokenize("where does Foo deploy")); // deploy, does, foo, where
/// assert_eq!(query.len(), 4);
/// assert_eq!(query.held_positions("FOO deploys; where?"), [2, 3]);
/// assert_eq!(query.held_positions("Ünïcode: WHERE does it"), [1, 3]);
/// ```
#[derive(Debug, Clone)]
pub struct QueryTokens {
    /// Each token's position in the query's token order.
    positions: HashMap<String, usize>,
    /// Bit `n` is set when some token is `n` bytes long (`n` < 64; bit 63 stands for longer):
    /// most words of a text are rejected by their length alone.
    lengths: u64,
}

impl QueryTokens {
    /// Readies `query_tokens` (as [`tokenize`] makes them).
    pub fn new(query_tokens: &BTreeSet<String>) -> Self {
        let positions: HashMap<String, usize> = query_tokens
            .iter()
            .enumerate()
            .map(|(position, token)| (token.clone(), position))
            .collect();
        let lengths = positions
            .keys()
            .fold(0, |bits, t| bits | length_bit(t.len()));
        Self { positions, lengths }
    }

    /// How many distinct tokens the query has.
    pub fn len(&self) -> usize {
        self.positions.len()
    }

    /// Whether the query has no token.
    pub fn is_empty(&self) -> bool {
        self.positions.is_empty()
    }

    /// The ascending positions of the query tokens `text` holds, as [`held_positions`].
    pub fn held_positions(&self, text: &str) -> Vec<usize> {
        let mut held = Vec::new();
        if self.positions.is_empty() {
            return held;
        }
        if !text.is_ascii() {
            held.extend(
                unicode_tokens(text)
                    .iter()
                    .filter_map(|token| self.positions.get(token).copied()),
            );
            held.sort_unstable();
            return held;
        }
        let mut lowered = String::new();
        for run in text.split(|c: char| !c.is_ascii_alphanumeric()) {
            if run.len() < MIN_TOKEN_CHARS || self.lengths & length_bit(run.len()) == 0 {
                continue;
            }
            lowered.clear();
            lowered.push_str(run);
            lowered.make_ascii_lowercase();
            if let Some(&position) = self.positions.get(&lowered) {
                held.push(position);
            }
        }
        held.sort_unstable();
        held.dedup();
        held
    }
}

fn length_bit(len: usize) -> u64 {
    1 << len.min(63)
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
    fn ascii_text_tokenizes_as_the_unicode_rules_say() {
        for text in [
            "Project Foo deploys to fly.io, us-east! x1 ab ABC_def-ghi 12345 a1b2c3",
            "What did Caroline (8 May 2023) paint?\tThe LAKE\n\u{7f}~`' tabs",
            "",
            "!!!",
        ] {
            assert!(text.is_ascii());
            assert_eq!(tokenize(text), unicode_tokens(text), "{text:?}");
        }
    }

    #[test]
    fn held_positions_are_those_of_the_intersection() {
        // Words past 63 bytes share one length bit: a 70-byte token, and a 72-byte word.
        let (long, longer) = ("x".repeat(70), "X".repeat(72));
        let query = tokenize(&format!("Straße CAFÉ deploy region east {long}"));
        let ready = QueryTokens::new(&query);
        for text in [
            "deploy to us-east, not the region; DEPLOY east again",
            "STRASSE und straße im Café",
            "nothing here",
            &long.to_uppercase(),
            &longer,
            "",
        ] {
            let held = tokenize(text);
            let want: Vec<usize> = query
                .iter()
                .enumerate()
                .filter(|(_, t)| held.contains(*t))
                .map(|(position, _)| position)
                .collect();
            assert_eq!(ready.held_positions(text), want, "{text:?}");
        }
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

    fn relevances_of(query: &str, documents: &[&str]) -> Vec<f64> {
        let tokens: Vec<BTreeSet<String>> = documents.iter().map(|d| tokenize(d)).collect();
        relevances(&tokenize(query), &tokens)
    }

    #[test]
    fn relevance_weighs_each_distinct_query_token_by_its_rarity_among_matches() {
        let r = relevances_of(
            "deploy deploy region",
            &[
                "deploy to region",
                "deploy now",
                "deploy later",
                "region only",
                "nothing",
            ],
        );
        // Among the 4 matches, "deploy" is in 3 and "region" in 2.
        let idf = |df: f64| (1.0 + (4.0 - df + 0.5) / (df + 0.5)).ln();
        let (deploy, region) = (idf(3.0), idf(2.0));
        assert!((r[0] - 1.0).abs() < f64::EPSILON, "every query token held");
        assert!((r[1] - deploy / (deploy + region)).abs() < 1e-12);
        assert!((r[1] - r[2]).abs() < f64::EPSILON);
        assert!((r[3] - region / (deploy + region)).abs() < 1e-12);
        assert!(r[3] > r[1], "the rarer token weighs more");
        assert!(r[4].abs() < f64::EPSILON);
    }

    #[test]
    fn documents_that_match_nothing_change_no_relevance() {
        let alone = relevances_of("rust memory", &["rust memory store", "rust compiler"]);
        let more = relevances_of(
            "rust memory",
            &[
                "rust memory store",
                "rust compiler",
                "gardening",
                "cooking tips",
            ],
        );
        assert_eq!(alone.len(), 2);
        for (a, b) in alone.iter().zip(&more) {
            assert!((a - b).abs() < f64::EPSILON);
        }
        assert!(
            relevances_of("an", &["an"])[0].abs() < f64::EPSILON,
            "no query tokens"
        );
    }
}
