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
//! Recall of messages ranks the candidates of a vector search in the engine, over their text,
//! so it can afford one step more where a [`Language`] is set: each token is brought to its
//! stem ([`terms`]: "painted" is "paint") and the question's stop words are left out
//! ([`query_terms`]: "what", "did", "the" decide nothing among a hundred candidates, few of
//! which hold them). The relevance is the same weighting over those terms.

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap};

use serde::{Deserialize, Serialize};
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

/// A language whose word forms recall of messages folds together ([`terms`]) and whose stop
/// words it leaves out of a question ([`query_terms`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Language {
    /// Snowball's English stemmer, and English function words as stop words.
    English,
}

impl Language {
    /// The stem of a token (as [`tokenize`] makes them).
    ///
    /// ```
    /// use mnemix_core::lexical::Language;
    /// assert_eq!(Language::English.stem("painted"), "paint");
    /// assert_eq!(Language::English.stem("paintings"), "paint");
    /// ```
    pub fn stem(self, token: &str) -> Cow<'_, str> {
        match self {
            Self::English => {
                rust_stemmers::Stemmer::create(rust_stemmers::Algorithm::English).stem(token)
            }
        }
    }

    /// Whether a token (as [`tokenize`] makes them) is one of the language's stop words.
    pub fn is_stop_word(self, token: &str) -> bool {
        match self {
            Self::English => ENGLISH_STOP_WORDS.binary_search(&token).is_ok(),
        }
    }
}

/// English function words of at least [`MIN_TOKEN_CHARS`] characters (shorter ones are no
/// tokens), sorted: what a question is built of rather than what it asks about.
#[rustfmt::skip]
const ENGLISH_STOP_WORDS: &[&str] = &[
    "about", "above", "after", "again", "against", "all", "also", "and", "any", "are", "because",
    "been", "before", "being", "below", "between", "both", "but", "can", "could", "did", "does",
    "doing", "done", "down", "during", "each", "else", "ever", "few", "for", "from", "further",
    "had", "has", "have", "having", "her", "here", "hers", "herself", "him", "himself", "his",
    "how", "into", "its", "itself", "just", "may", "might", "more", "most", "much", "must",
    "myself", "nor", "not", "now", "off", "once", "only", "other", "our", "ours", "ourselves",
    "out", "over", "own", "same", "shall", "she", "should", "some", "such", "than", "that", "the",
    "their", "theirs", "them", "themselves", "then", "there", "these", "they", "this", "those",
    "through", "too", "under", "until", "upon", "very", "was", "were", "what", "when", "where",
    "which", "while", "who", "whom", "whose", "why", "will", "with", "would", "yet", "you", "your",
    "yours", "yourself", "yourselves",
];

/// The distinct terms of a text in `language`: its tokens ([`tokenize`]) brought to their
/// stems; without a language, its tokens.
///
/// ```
/// use mnemix_core::lexical::{terms, Language};
/// let terms: Vec<_> = terms("She painted lakes", Some(Language::English)).into_iter().collect();
/// assert_eq!(terms, ["lake", "paint", "she"]);
/// ```
pub fn terms(text: &str, language: Option<Language>) -> BTreeSet<String> {
    let tokens = tokenize(text);
    match language {
        None => tokens,
        Some(language) => tokens
            .iter()
            .map(|token| language.stem(token).into_owned())
            .collect(),
    }
}

/// The distinct terms of a question in `language`: its tokens without the language's stop
/// words (all of them when nothing else is left), brought to their stems; without a language,
/// its tokens.
///
/// ```
/// use mnemix_core::lexical::{query_terms, Language};
/// let english = Some(Language::English);
/// let asked: Vec<_> = query_terms("What did Caroline paint?", english).into_iter().collect();
/// assert_eq!(asked, ["carolin", "paint"]);
/// let only_stop_words: Vec<_> = query_terms("What was that?", english).into_iter().collect();
/// assert_eq!(only_stop_words, ["that", "was", "what"]);
/// ```
pub fn query_terms(text: &str, language: Option<Language>) -> BTreeSet<String> {
    let tokens = tokenize(text);
    let Some(language) = language else {
        return tokens;
    };
    let asked: Vec<&String> = tokens
        .iter()
        .filter(|token| !language.is_stop_word(token))
        .collect();
    if asked.is_empty() {
        return terms(text, Some(language));
    }
    asked
        .into_iter()
        .map(|token| language.stem(token).into_owned())
        .collect()
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
    /// Set when the tokens are a question's terms in a language ([`QueryTokens::of_question`]).
    stems: Option<Stems>,
}

/// How a question's terms in a language are found among a text's words.
#[derive(Debug, Clone)]
struct Stems {
    language: Language,
    /// What a word must begin with to stem to one of the terms ([`stem_prefix`]), distinct,
    /// grouped by first character (sorted by it): a word is compared with its own group only.
    prefixes: Vec<(char, Vec<String>)>,
    /// The prefixes' first two bytes, by [`byte_class`]: bit `b` of `openings[a]` is set when
    /// some prefix opens with bytes of classes `a` then `b` (every `b` for a one-byte prefix),
    /// so most words are passed over by one lookup.
    openings: [u64; BYTE_CLASSES],
}

/// How many classes [`byte_class`] sorts bytes into.
const BYTE_CLASSES: usize = 37;

/// An ASCII letter's (either case) or digit's own class, and one class for every other byte:
/// a word's first two bytes, compared as [`Stems::might_stem_to_a_term`] compares them.
fn byte_class(byte: u8) -> usize {
    match byte.to_ascii_lowercase() {
        letter @ b'a'..=b'z' => usize::from(letter - b'a'),
        digit @ b'0'..=b'9' => 26 + usize::from(digit - b'0'),
        _ => BYTE_CLASSES - 1,
    }
}

impl Stems {
    fn new<'t>(language: Language, terms: impl Iterator<Item = &'t String>) -> Self {
        let mut prefixes: Vec<(char, Vec<String>)> = Vec::new();
        let mut openings = [0_u64; BYTE_CLASSES];
        for prefix in terms.map(|t| stem_prefix(t)).collect::<BTreeSet<_>>() {
            let first = prefix.chars().next().unwrap_or_default();
            match prefixes.last_mut() {
                Some((group, same)) if *group == first => same.push(prefix.to_owned()),
                _ => prefixes.push((first, vec![prefix.to_owned()])),
            }
            let bytes = prefix.as_bytes();
            if let Some(&opening) = bytes.first() {
                openings[byte_class(opening)] |= bytes
                    .get(1)
                    .map_or(u64::MAX, |&second| 1 << byte_class(second));
            }
        }
        Self {
            language,
            prefixes,
            openings,
        }
    }

    /// Whether `word` (a token, or an ASCII one before lowercasing) begins with a term's stem
    /// prefix: only then can it stem to the term, so most words are passed over before the
    /// stemmer runs (the costly part), most by their first two bytes alone.
    fn might_stem_to_a_term(&self, word: &str) -> bool {
        let bytes = word.as_bytes();
        let Some(&opening) = bytes.first() else {
            return false;
        };
        let second = bytes
            .get(1)
            .map_or(u64::MAX, |&second| 1 << byte_class(second));
        if self.openings[byte_class(opening)] & second == 0 {
            return false;
        }
        let first = word.chars().next().unwrap_or_default().to_ascii_lowercase();
        let group = self
            .prefixes
            .binary_search_by_key(&first, |(group, _)| *group)
            .map_or(&[][..], |at| &self.prefixes[at].1);
        group.iter().any(|prefix| {
            word.get(..prefix.len())
                .is_some_and(|start| start.eq_ignore_ascii_case(prefix))
        })
    }
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
        Self {
            positions,
            lengths,
            stems: None,
        }
    }

    /// Readies a question's terms in `language` ([`query_terms`]), to be found among texts'
    /// words by [`held_terms`](Self::held_terms); without a language, its tokens.
    ///
    /// ```
    /// use mnemix_core::lexical::{Language, QueryTokens};
    /// let asked = "what did Caroline paint";
    /// let query = QueryTokens::of_question(asked, Some(Language::English)); // carolin, paint
    /// assert_eq!(query.held_terms("Caroline painted a lake"), [0, 1]);
    /// let as_written = QueryTokens::of_question(asked, None); // caroline, did, paint, what
    /// assert_eq!(as_written.held_terms("Caroline painted a lake"), [0]);
    /// ```
    pub fn of_question(question: &str, language: Option<Language>) -> Self {
        let mut query = Self::new(&query_terms(question, language));
        query.stems = language.map(|language| Stems::new(language, query.positions.keys()));
        query
    }

    /// How many distinct tokens the query has.
    pub fn len(&self) -> usize {
        self.positions.len()
    }

    /// Whether the query has no token.
    pub fn is_empty(&self) -> bool {
        self.positions.is_empty()
    }

    /// The ascending positions of the question's terms that `text` holds: of those its words
    /// stem to, for a question in a language ([`of_question`](Self::of_question)); else
    /// [`held_positions`](Self::held_positions).
    pub fn held_terms(&self, text: &str) -> Vec<usize> {
        self.held_terms_of_each([text]).pop().unwrap_or_default()
    }

    /// [`held_terms`](Self::held_terms) of each of `texts`, in order: a word they share is
    /// stemmed once (a ranking's candidates share most of theirs).
    ///
    /// ```
    /// use mnemix_core::lexical::{Language, QueryTokens};
    /// let query = QueryTokens::of_question("what did Caroline paint", Some(Language::English));
    /// let held = query.held_terms_of_each(["Caroline painted", "a painting", "lakes"]);
    /// assert_eq!(held, [vec![0, 1], vec![1], vec![]]);
    /// ```
    pub fn held_terms_of_each<'t>(
        &self,
        texts: impl IntoIterator<Item = &'t str>,
    ) -> Vec<Vec<usize>> {
        let Some(stems) = &self.stems else {
            return texts
                .into_iter()
                .map(|text| self.held_positions(text))
                .collect();
        };
        let mut stemmed: foldhash::HashMap<String, Option<usize>> = HashMap::default();
        let mut held = Vec::new();
        for text in texts {
            // A word that may stem to a term is stemmed once, however many texts hold it.
            held.push(self.held_where(
                text,
                |word| stems.might_stem_to_a_term(word),
                |token| {
                    if let Some(&position) = stemmed.get(token) {
                        return position;
                    }
                    let position = self
                        .positions
                        .get(stems.language.stem(token).as_ref())
                        .copied();
                    stemmed.insert(token.to_owned(), position);
                    position
                },
            ));
        }
        held
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
    /// `may_hold` first. A text that [`splits_as_ascii`] has its words split, checked and
    /// lowercased in place (`may_hold` sees them before lowercasing, so it compares ASCII
    /// case-insensitively), and none is allocated that `may_hold` refuses.
    fn held_where(
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

/// What every word whose Snowball English stem is `stem` begins with. The stemmer replaces
/// suffixes, so the stem is the word's beginning but where a replacement ends in `e` ("hoping"
/// is "hope", "relational" "relate"), turns `y` into `i` ("early" is "earli") or `i` into `y`
/// ("skies" is "sky"), writes "ble" for "bility", or drops the `e` of that "ble" after
/// ("ability" is "abl"); "dying", "lying" and "tying" are "die", "lie" and "tie". (English's
/// rules: another language's stemmer needs its own.)
fn stem_prefix(stem: &str) -> &str {
    let changed = if stem.ends_with("ble") || ["die", "lie", "tie"].contains(&stem) {
        2
    } else {
        usize::from(stem.ends_with(['e', 'i', 'y']) || stem.ends_with("bl"))
    };
    let kept = stem.chars().count().saturating_sub(changed).max(1);
    let end = stem
        .char_indices()
        .nth(kept)
        .map_or(stem.len(), |(at, _)| at);
    &stem[..end]
}

fn length_bit(len: usize) -> u64 {
    1 << len.min(63)
}

/// The terms of texts that rankings weigh again and again — a conversation's messages,
/// recalled turn after turn — remembered within a memory budget, so each text is split and
/// stemmed once, not once per question: [`held_terms_of_each`](Self::held_terms_of_each)
/// answers as [`QueryTokens::held_terms_of_each`] does.
///
/// A text is known by a 128-bit hash of it and its terms are kept as 64-bit hashes (about 8
/// bytes a term rather than the term): answers differ only where two hashes collide.
///
/// ```
/// use mnemix_core::lexical::{Language, QueryTokens, TermsCache};
/// let english = Some(Language::English);
/// let cache = TermsCache::new(english, 1 << 20);
/// let query = QueryTokens::of_question("what did Caroline paint", english);
/// let texts = ["Caroline painted", "a painting", "lakes"];
/// assert_eq!(cache.held_terms_of_each(&query, texts), [vec![0, 1], vec![1], vec![]]);
/// assert_eq!(cache.held_terms_of_each(&query, texts), query.held_terms_of_each(texts));
/// ```
#[derive(Debug)]
pub struct TermsCache {
    language: Option<Language>,
    budget: usize,
    state: std::sync::Mutex<TermsState>,
}

#[derive(Debug, Default)]
struct TermsState {
    texts: foldhash::HashMap<u128, std::sync::Arc<[u64]>>,
    bytes: usize,
}

impl TermsCache {
    /// A cache of texts' terms in `language` ([`terms`]) holding at most about `budget` bytes
    /// (0 keeps nothing).
    pub fn new(language: Option<Language>, budget: usize) -> Self {
        Self {
            language,
            budget,
            state: std::sync::Mutex::default(),
        }
    }

    /// The ascending positions of `query`'s terms that each of `texts` holds, as
    /// [`QueryTokens::held_terms_of_each`] finds them, from the texts' remembered terms (a
    /// query of another language than the cache's is answered without it).
    pub fn held_terms_of_each<'t>(
        &self,
        query: &QueryTokens,
        texts: impl IntoIterator<Item = &'t str>,
    ) -> Vec<Vec<usize>> {
        if query.stems.as_ref().map(|stems| stems.language) != self.language {
            return query.held_terms_of_each(texts);
        }
        let positions: foldhash::HashMap<u64, usize> = query
            .positions
            .iter()
            .map(|(term, &position)| (term_hash(term), position))
            .collect();
        texts
            .into_iter()
            .map(|text| {
                let mut held: Vec<usize> = self
                    .terms_of(text)
                    .iter()
                    .filter_map(|term| positions.get(term).copied())
                    .collect();
                held.sort_unstable();
                held.dedup();
                held
            })
            .collect()
    }

    /// The hashes of `text`'s terms, remembered.
    fn terms_of(&self, text: &str) -> std::sync::Arc<[u64]> {
        let key = text_hash(text);
        if let Some(known) = self.state().texts.get(&key) {
            return known.clone();
        }
        let mut hashes: Vec<u64> = terms(text, self.language)
            .iter()
            .map(|term| term_hash(term))
            .collect();
        hashes.sort_unstable();
        hashes.dedup();
        let hashes: std::sync::Arc<[u64]> = hashes.into();
        // The key, the shared slice's counts and its hashes, and the map's slot.
        let bytes = 2 * size_of::<u128>() + 8 * hashes.len() + size_of::<std::sync::Arc<[u64]>>();
        if bytes <= self.budget {
            let mut state = self.state();
            if state.bytes + bytes > self.budget {
                // As `MatrixCache`: start over rather than track recency.
                *state = TermsState::default();
            }
            if state.texts.insert(key, hashes.clone()).is_none() {
                state.bytes += bytes;
            }
        }
        hashes
    }

    fn state(&self) -> std::sync::MutexGuard<'_, TermsState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A 128-bit hash of a text: two 64-bit hashes of different seeds.
fn text_hash(text: &str) -> u128 {
    use std::hash::BuildHasher;
    let low = foldhash::quality::FixedState::with_seed(0x6c65_7869_6361_6c31).hash_one(text);
    let high = foldhash::quality::FixedState::with_seed(0x7465_726d_7332_3536).hash_one(text);
    u128::from(high) << 64 | u128::from(low)
}

/// A term's 64-bit hash.
fn term_hash(term: &str) -> u64 {
    use std::hash::BuildHasher;
    foldhash::quality::FixedState::with_seed(0x7465_726d_2068_6173).hash_one(term)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn english_stop_words_are_sorted_tokens() {
        assert!(ENGLISH_STOP_WORDS.windows(2).all(|w| w[0] < w[1]));
        for word in ENGLISH_STOP_WORDS {
            assert_eq!(tokenize(word).into_iter().collect::<Vec<_>>(), [*word]);
        }
    }

    #[test]
    fn english_terms_fold_word_forms_and_keep_other_scripts() {
        let english = Some(Language::English);
        let asked = "Which paintings did Straße ОКНО show?";
        let query = query_terms(asked, english);
        let ready = QueryTokens::of_question(asked, english);
        for text in ["she painted it", "the painting", "Straße", "окно"] {
            assert!(
                !ready.held_terms(text).is_empty(),
                "{text} holds a term of {query:?}"
            );
        }
        assert!(ready
            .held_terms("which did show")
            .contains(&query.iter().position(|t| t == "show").unwrap()));
        assert!(!query.iter().any(|t| t == "which" || t == "did"));
    }

    #[test]
    fn a_word_begins_with_its_stems_prefix() {
        // What `held_terms` passes words over by (it held for all 195,458 distinct tokens of
        // the benchmarks' Debian corpus and Debian's american-english-large word list); the
        // Snowball exceptions, the suffixes that add a letter back ("hoping" is "hope") and
        // replaced ones ("ability" is "able") included, and the English of this file.
        let words = "dying lying tying skies news gently ugly early only singly sky idly howe \
            atlas cosmos bias andes generate generous communism arsenal succeeded proceed \
            exceed hoping luxuriated conflated troubled sized hopping filing agreed feed bled \
            yes years say youth yelling you're ÿear überlegen straße naïve caféteria ability \
            possibility relational valency conditional organization operator sensitivity \
            hopefulness callousness decisiveness formality electrical electricity";
        for word in tokenize(words)
            .iter()
            .chain(&tokenize(include_str!("lexical.rs")))
        {
            let stem = Language::English.stem(word);
            assert!(stem.len() <= word.len(), "{word} -> {stem}");
            assert!(word.starts_with(stem_prefix(&stem)), "{word} -> {stem}");
            // One word is its own question: its stop words are kept when nothing else is.
            let query = QueryTokens::of_question(word, Some(Language::English));
            assert_eq!(query.held_terms(word), [0], "{word}");
        }
    }

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

    proptest::proptest! {
        /// The cache answers as the question does, for texts seen before or not, in either
        /// language, whatever the budget (none, one that starts over often, a large one);
        /// words drawn from a few stems, so texts and questions share terms in many forms.
        #[test]
        fn the_terms_cache_holds_what_the_question_finds(
            question in proptest::collection::vec(0usize..12, 1..6),
            texts in proptest::collection::vec(proptest::collection::vec(0usize..12, 0..8), 1..12),
            budget in proptest::sample::select(vec![0usize, 200, 1 << 20]),
        ) {
            const WORDS: [&str; 12] = [
                "painted", "Painting", "paints", "lakes", "LAKE", "the", "what", "ünïcode",
                "Straße", "did", "x1", "sky",
            ];
            let sentence = |picked: &Vec<usize>| {
                picked.iter().map(|&w| WORDS[w]).collect::<Vec<_>>().join(" ")
            };
            let question = sentence(&question);
            let texts: Vec<String> = texts.iter().map(sentence).collect();
            for language in [Some(Language::English), None] {
                let cache = TermsCache::new(language, budget);
                let query = QueryTokens::of_question(&question, language);
                let found = query.held_terms_of_each(texts.iter().map(String::as_str));
                for _ in 0..2 {
                    let cached = cache.held_terms_of_each(&query, texts.iter().map(String::as_str));
                    proptest::prop_assert_eq!(&cached, &found);
                }
            }
        }
    }
}
