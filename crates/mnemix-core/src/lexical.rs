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
//! No stemming and no stop-word list in the tokens: both are language-specific, and the tokens
//! are what every backend indexes. The weighting does what a stop-word list would, in any
//! language.
//!
//! Recall of messages (in `mnemix-engine`) ranks the candidates of a vector search over their
//! text, so it can afford one step more in a language: it stems the tokens and leaves a
//! question's stop words out, and finds those terms in texts through
//! [`QueryTokens::held_where`]; the relevance is the same weighting ([`relevances_of_held`]).

use std::collections::BTreeSet;

use unicode_normalization::UnicodeNormalization;

use crate::limits::MIN_TOKEN_CHARS;

/// The distinct tokens of a text, sorted.
///
/// ```
/// use mnemix_core::lexical::tokenize;
/// let tokens: Vec<_> = tokenize("Project Foo deploys to fly.io, us-east!").into_iter().collect();
/// assert_eq!(tokens, ["deploys", "east", "fly", "foo", "project"]);
/// ```
pub fn tokenize(text: &str) -> BTreeSet<String> {
    if splits_as_ascii(text) {
        // The same tokens without the Unicode passes: ASCII is its own NFKC and NFC, its
        // alphanumerics and lowercase are ASCII's, and the plain separators stay separators
        // (most text a recall ranks).
        return ascii_words(text)
            .filter(|run| run.len() >= MIN_TOKEN_CHARS)
            .map(str::to_ascii_lowercase)
            .collect();
    }
    unicode_tokens(text)
}

/// Whether `text` tokenizes as its ASCII words alone: it is ASCII but for [`PLAIN_SEPARATORS`].
fn splits_as_ascii(text: &str) -> bool {
    text.is_ascii()
        || text.chars().all(|c| {
            // The first range not wholly below `c` holds it or none does.
            let at = PLAIN_SEPARATORS.partition_point(|&(_, last)| last < c);
            c.is_ascii()
                || PLAIN_SEPARATORS
                    .get(at)
                    .is_some_and(|&(first, _)| first <= c)
        })
}

/// The maximal runs of ASCII alphanumerics of `text` (of a text that [`splits_as_ascii`], its
/// words), found byte by byte: a non-ASCII character's bytes are never ASCII alphanumerics.
fn ascii_words(text: &str) -> impl Iterator<Item = &str> {
    let bytes = text.as_bytes();
    let mut at = 0;
    std::iter::from_fn(move || {
        let start = at + bytes[at..].iter().position(u8::is_ascii_alphanumeric)?;
        at = bytes[start..]
            .iter()
            .position(|b| !b.is_ascii_alphanumeric())
            .map_or(bytes.len(), |length| start + length);
        Some(&text[start..at])
    })
}

/// The punctuation, symbols and emoji of everyday text that stay separators whatever stands
/// beside them (inclusive ranges, sorted): no alphanumeric in any one's NFKC form, all of which
/// are starters that compose with no neighbour, ASCII or of this list (the test
/// `plain_separators_never_meet_their_neighbours` checks each). Between ASCII words they leave
/// the words as the ASCII rules make them, so the Unicode passes (a normalisation and an
/// allocation per token) are only for text with letters or digits beyond ASCII.
#[rustfmt::skip]
const PLAIN_SEPARATORS: &[(char, char)] = &[
    ('\u{a0}', '\u{a7}'), ('\u{a9}', '\u{a9}'), ('\u{ab}', '\u{ae}'), ('\u{b0}', '\u{b1}'),
    ('\u{b6}', '\u{b7}'), ('\u{bb}', '\u{bb}'), ('\u{bf}', '\u{bf}'), ('\u{d7}', '\u{d7}'),
    ('\u{f7}', '\u{f7}'),
    // General punctuation: spaces, dashes, quotes, bullets, ellipsis, joiners.
    ('\u{2000}', '\u{2016}'), ('\u{2018}', '\u{203d}'), ('\u{203f}', '\u{206f}'),
    // Currency, arrows, mathematical and technical symbols, shapes, dingbats.
    ('\u{20a0}', '\u{20a7}'), ('\u{20a9}', '\u{20c0}'), ('\u{2190}', '\u{23ff}'),
    ('\u{2500}', '\u{2775}'), ('\u{2794}', '\u{2adb}'), ('\u{2add}', '\u{2bff}'),
    // CJK and full-width punctuation.
    ('\u{3000}', '\u{3004}'), ('\u{3008}', '\u{3020}'), ('\u{fe0e}', '\u{fe0f}'),
    ('\u{ff01}', '\u{ff0f}'), ('\u{ff1a}', '\u{ff20}'), ('\u{ff3b}', '\u{ff40}'),
    ('\u{ff5b}', '\u{ff65}'),
    // Emoji: game symbols, flags' regional indicators, pictographs, emoticons, transport.
    ('\u{1f000}', '\u{1f0ff}'), ('\u{1f1e6}', '\u{1f1ff}'), ('\u{1f300}', '\u{1f6ff}'),
    ('\u{1f900}', '\u{1faff}'),
];

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
/// use mnemix_core::lexical::{relevances, tokenize};
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
/// use mnemix_core::lexical::{relevances, relevances_of_held, tokenize};
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
/// use mnemix_core::lexical::{held_positions, tokenize};
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
/// use mnemix_core::lexical::{tokenize, QueryTokens};
/// let query = QueryTokens::new(&tokenize("where does Foo deploy")); // deploy, does, foo, where
/// assert_eq!(query.len(), 4);
/// assert_eq!(query.held_positions("FOO deploys; where?"), [2, 3]);
/// assert_eq!(query.held_positions("Ünïcode: WHERE does it"), [1, 3]);
/// ```
#[derive(Debug, Clone)]
pub struct QueryTokens {
    /// Each token's position in the query's token order.
    positions: foldhash::HashMap<String, usize>,
    /// Bit `n` is set when some token is `n` bytes long (`n` < 64; bit 63 stands for longer):
    /// most words of a text are rejected by their length alone.
    lengths: u64,
}

impl QueryTokens {
    /// Readies `query_tokens` (as [`tokenize`] makes them).
    pub fn new(query_tokens: &BTreeSet<String>) -> Self {
        let positions: foldhash::HashMap<String, usize> = query_tokens
            .iter()
            .enumerate()
            .map(|(position, token)| (token.clone(), position))
            .collect();
        let lengths = positions
            .keys()
            .fold(0, |bits, t| bits | length_bit(t.len()));
        Self { positions, lengths }
    }

    /// The position of `token` in the query's token order, if it is one of them.
    pub fn position(&self, token: &str) -> Option<usize> {
        self.positions.get(token).copied()
    }

    /// The query's tokens with their positions, in no particular order.
    pub fn tokens(&self) -> impl Iterator<Item = (&str, usize)> {
        self.positions
            .iter()
            .map(|(token, &at)| (token.as_str(), at))
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
        self.held_where(
            text,
            |word| self.lengths & length_bit(word.len()) != 0,
            |token| self.positions.get(token).copied(),
        )
    }

    /// The ascending distinct positions `position_of` gives the tokens of `text` that pass
    /// `may_hold` first: how a ranking that matches tokens its own way (the engine's stemmed
    /// terms) finds them in texts as [`held_positions`](Self::held_positions) does. A text of
    /// ASCII words has them split, checked and lowercased in place (`may_hold` sees them
    /// before lowercasing, so it compares ASCII case-insensitively), and none is allocated that
    /// `may_hold` refuses; other text is [`tokenize`]d. Nothing is held when the query has no
    /// token.
    pub fn held_where(
        &self,
        text: &str,
        may_hold: impl Fn(&str) -> bool,
        mut position_of: impl FnMut(&str) -> Option<usize>,
    ) -> Vec<usize> {
        let mut held = Vec::new();
        if self.positions.is_empty() {
            return held;
        }
        if splits_as_ascii(text) {
            let mut lowered = String::new();
            for run in ascii_words(text) {
                if run.len() < MIN_TOKEN_CHARS || !may_hold(run) {
                    continue;
                }
                lowered.clear();
                lowered.push_str(run);
                lowered.make_ascii_lowercase();
                held.extend(position_of(&lowered));
            }
        } else {
            for token in &unicode_tokens(text) {
                if may_hold(token) {
                    held.extend(position_of(token));
                }
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
            "It\u{2019}s \u{201c}quoted\u{201d} \u{2014} done\u{2026} \u{1f389}\u{1f44d}\u{1f3fd}\u{fe0f}ok\u{a0}now",
        ] {
            assert!(splits_as_ascii(text));
            assert_eq!(tokenize(text), unicode_tokens(text), "{text:?}");
        }
        assert!(!splits_as_ascii("caf\u{e9}") && !splits_as_ascii("\u{2122} x\u{b2}"));
    }

    #[test]
    fn plain_separators_never_meet_their_neighbours() {
        use unicode_normalization::char::{
            canonical_combining_class, compose, decompose_compatible,
        };
        assert!(PLAIN_SEPARATORS.iter().all(|(first, last)| first <= last));
        assert!(PLAIN_SEPARATORS.windows(2).all(|w| w[0].1 < w[1].0));
        let separators: Vec<char> = PLAIN_SEPARATORS.iter().flat_map(|&(a, b)| a..=b).collect();
        // Each character's first of its compatibility decomposition and last of its NFKC form:
        // where a neighbour could compose with it.
        let mut firsts = BTreeSet::new();
        let mut lasts = BTreeSet::new();
        let mut unfit = Vec::new();
        for c in (0..128_u8)
            .map(char::from)
            .chain(separators.iter().copied())
        {
            let form: Vec<char> = std::iter::once(c).nfkc().collect();
            let mut decomposed = Vec::new();
            decompose_compatible(c, |d| decomposed.push(d));
            if !form.iter().all(|&d| {
                (c.is_ascii() || !d.is_alphanumeric()) && canonical_combining_class(d) == 0
            }) || canonical_combining_class(decomposed[0]) != 0
            {
                unfit.push(format!("{:x} {form:?}", c as u32));
            }
            firsts.insert(decomposed[0]);
            lasts.extend(form.last());
        }
        for &last in &lasts {
            for &first in &firsts {
                if compose(last, first).is_some() {
                    unfit.push(format!("{:x} {:x} compose", last as u32, first as u32));
                }
            }
        }
        assert!(unfit.is_empty(), "{unfit:#?}");
        let text: String = separators
            .iter()
            .flat_map(|&c| [c, 'a', 'B', 'c', c, c])
            .collect();
        assert_eq!(tokenize(&text), unicode_tokens(&text));
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
