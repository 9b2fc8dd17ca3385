//! The words side of message recall: a question's terms in a language, found among the
//! candidates' words. Each token ([`tokenize`], core's one definition) is brought to its stem
//! ([`terms`]: "painted" is "paint") and the question's stop words are left out
//! ([`query_terms`]: "what", "did", "the" decide nothing among a hundred candidates, few of
//! which hold them); the relevance is core's weighting over those terms
//! ([`relevances_of_held`](mnemix_core::lexical::relevances_of_held)). Facts' recall, which
//! every backend computes identically, has no stemming: this is the engine's alone.

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap};

use mnemix_core::lexical::{tokenize, QueryTokens};
use serde::{Deserialize, Serialize};

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
    /// use mnemix_engine::terms::Language;
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

/// English function words of at least [`MIN_TOKEN_CHARS`](mnemix_core::limits::MIN_TOKEN_CHARS) characters (shorter ones are no
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
/// use mnemix_engine::terms::{terms, Language};
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
/// use mnemix_engine::terms::{query_terms, Language};
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

/// A question's terms in a language ([`query_terms`]), made ready to be found among many
/// texts' words ([`held_terms_of_each`](Self::held_terms_of_each)): a word is stemmed only when
/// it may stem to a term.
#[derive(Debug, Clone)]
pub struct QuestionTerms {
    tokens: QueryTokens,
    /// Set when the terms are in a language.
    stems: Option<Stems>,
}

impl QuestionTerms {
    /// Readies a question's terms in `language` ([`query_terms`]), to be found among texts'
    /// words by [`held_terms`](Self::held_terms); without a language, its tokens.
    ///
    /// ```
    /// use mnemix_engine::terms::{Language, QuestionTerms};
    /// let asked = "what did Caroline paint";
    /// let query = QuestionTerms::of_question(asked, Some(Language::English)); // carolin, paint
    /// assert_eq!(query.held_terms("Caroline painted a lake"), [0, 1]);
    /// let as_written = QuestionTerms::of_question(asked, None); // caroline, did, paint, what
    /// assert_eq!(as_written.held_terms("Caroline painted a lake"), [0]);
    /// ```
    pub fn of_question(question: &str, language: Option<Language>) -> Self {
        let tokens = QueryTokens::new(&query_terms(question, language));
        let stems =
            language.map(|language| Stems::new(language, tokens.tokens().map(|(term, _)| term)));
        Self { tokens, stems }
    }

    /// How many distinct terms the question has.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Whether the question has no term.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The ascending positions of the question's terms that `text` holds: of those its words
    /// stem to, for a question in a language ([`of_question`](Self::of_question)); else
    /// [`QueryTokens::held_positions`].
    pub fn held_terms(&self, text: &str) -> Vec<usize> {
        self.held_terms_of_each([text]).pop().unwrap_or_default()
    }

    /// [`held_terms`](Self::held_terms) of each of `texts`, in order: a word they share is
    /// stemmed once (a ranking's candidates share most of theirs).
    ///
    /// ```
    /// use mnemix_engine::terms::{Language, QuestionTerms};
    /// let query = QuestionTerms::of_question("what did Caroline paint", Some(Language::English));
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
                .map(|text| self.tokens.held_positions(text))
                .collect();
        };
        let mut stemmed: foldhash::HashMap<String, Option<usize>> = HashMap::default();
        let mut held = Vec::new();
        for text in texts {
            // A word that may stem to a term is stemmed once, however many texts hold it.
            held.push(self.tokens.held_where(
                text,
                |word| stems.might_stem_to_a_term(word),
                |token| {
                    if let Some(&position) = stemmed.get(token) {
                        return position;
                    }
                    let position = self.tokens.position(&stems.language.stem(token));
                    stemmed.insert(token.to_owned(), position);
                    position
                },
            ));
        }
        held
    }
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
    fn new<'t>(language: Language, terms: impl Iterator<Item = &'t str>) -> Self {
        let mut prefixes: Vec<(char, Vec<String>)> = Vec::new();
        let mut openings = [0_u64; BYTE_CLASSES];
        for prefix in terms.map(stem_prefix).collect::<BTreeSet<_>>() {
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

/// The terms of texts that rankings weigh again and again — a conversation's messages,
/// recalled turn after turn — remembered within a memory budget, so each text is split and
/// stemmed once, not once per question: [`held_terms_of_each`](Self::held_terms_of_each)
/// answers as [`QuestionTerms::held_terms_of_each`] does.
///
/// A text is known by a 128-bit hash of it and its terms are kept as 64-bit hashes (about 8
/// bytes a term rather than the term): answers differ only where two hashes collide.
///
/// ```
/// use mnemix_engine::terms::{Language, QuestionTerms, TermsCache};
/// let english = Some(Language::English);
/// let cache = TermsCache::new(english, 1 << 20);
/// let query = QuestionTerms::of_question("what did Caroline paint", english);
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
    /// [`QuestionTerms::held_terms_of_each`] finds them, from the texts' remembered terms (a
    /// query of another language than the cache's is answered without it).
    pub fn held_terms_of_each<'t>(
        &self,
        query: &QuestionTerms,
        texts: impl IntoIterator<Item = &'t str>,
    ) -> Vec<Vec<usize>> {
        if query.stems.as_ref().map(|stems| stems.language) != self.language {
            return query.held_terms_of_each(texts);
        }
        let positions: foldhash::HashMap<u64, usize> = query
            .tokens
            .tokens()
            .map(|(term, position)| (term_hash(term), position))
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
        let ready = QuestionTerms::of_question(asked, english);
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
            .chain(&tokenize(include_str!("terms.rs")))
        {
            let stem = Language::English.stem(word);
            assert!(stem.len() <= word.len(), "{word} -> {stem}");
            assert!(word.starts_with(stem_prefix(&stem)), "{word} -> {stem}");
            // One word is its own question: its stop words are kept when nothing else is.
            let query = QuestionTerms::of_question(word, Some(Language::English));
            assert_eq!(query.held_terms(word), [0], "{word}");
        }
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
                let query = QuestionTerms::of_question(&question, language);
                let found = query.held_terms_of_each(texts.iter().map(String::as_str));
                for _ in 0..2 {
                    let cached = cache.held_terms_of_each(&query, texts.iter().map(String::as_str));
                    proptest::prop_assert_eq!(&cached, &found);
                }
            }
        }
    }
}
