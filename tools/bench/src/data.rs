//! Benchmark data: real English text and its real embeddings, made once and cached.
//!
//! - **Paragraphs**: the long descriptions of Debian packages (tens of thousands, 80–1,500
//!   characters), read from the English translation index of the machine's apt sources into a
//!   private lists folder (the system's apt state is left alone), sorted by package name so
//!   every machine writes the same file. They are the messages.
//! - **Sentences**: the paragraphs cut at sentence ends, 30–400 characters, first occurrence
//!   kept. They are the facts and the vectors' texts, and the held-out ones are the queries.
//! - **Embeddings**: all-MiniLM-L6-v2 vectors of the first `n` sentences (384 little-endian
//!   `f32` each), computed by the `bench-data` binary with the local embedder.
//!
//! Everything lives in one folder (`target/bench-data` when run by `cargo xtask bench`).

use std::collections::{BTreeMap, HashSet};
use std::io::{BufRead as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Dimensions of all-MiniLM-L6-v2.
pub const DIMS: usize = 384;

/// Shortest paragraph kept (as the corpus tool of the workplace does).
const MIN_PARAGRAPH_CHARS: usize = 80;

/// The corpus file of a data folder.
pub fn corpus_path(dir: &Path) -> PathBuf {
    dir.join("debian-descriptions.jsonl")
}

/// The embeddings file of the first `n` sentences.
pub fn embeddings_path(dir: &Path, n: usize) -> PathBuf {
    dir.join(format!("minilm-sentences-{n}.f32"))
}

/// Writes the corpus file unless it exists; returns its path.
pub fn ensure_corpus(dir: &Path) -> Result<PathBuf, String> {
    let out = corpus_path(dir);
    if out.exists() {
        return Ok(out);
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    // Absolute: apt reads a relative Dir::State::Lists under its own state folder.
    let lists = std::path::absolute(dir.join("apt-lists")).map_err(|e| e.to_string())?;
    std::fs::create_dir_all(lists.join("partial"))
        .map_err(|e| format!("cannot create {}: {e}", lists.display()))?;
    // The English descriptions, even where apt.conf.d turns translations off (Debian's
    // container images set `Acquire::Languages "none"`, which `-o` cannot clear: a list).
    let languages = dir.join("apt-languages.conf");
    std::fs::write(
        &languages,
        "#clear Acquire::Languages;\nAcquire::Languages { \"en\"; };\n",
    )
    .map_err(|e| format!("cannot write {}: {e}", languages.display()))?;
    let status = Command::new("apt-get")
        .arg("-q")
        .arg("-c")
        .arg(&languages)
        .arg("-o")
        .arg(format!("Dir::State::Lists={}", lists.display()))
        .arg("update")
        .stdout(std::process::Stdio::null())
        .status()
        .map_err(|e| format!("cannot run apt-get (the corpus needs Debian's apt): {e}"))?;
    if !status.success() {
        return Err(format!(
            "apt-get update into {} failed ({status}); it needs root and Debian's package sources",
            lists.display()
        ));
    }
    let mut by_package: BTreeMap<String, String> = BTreeMap::new();
    let mut indexes: Vec<PathBuf> = std::fs::read_dir(&lists)
        .map_err(|e| e.to_string())?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.contains("_i18n_Translation-en"))
        })
        .collect();
    indexes.sort();
    if indexes.is_empty() {
        return Err("apt fetched no English translation index (Translation-en)".into());
    }
    for index in &indexes {
        // apt-helper decompresses whatever compression apt chose to keep.
        let output = Command::new("/usr/lib/apt/apt-helper")
            .arg("cat-file")
            .arg(index)
            .output()
            .map_err(|e| format!("cannot run apt-helper: {e}"))?;
        for (package, text) in descriptions(&String::from_utf8_lossy(&output.stdout)) {
            by_package.entry(package).or_insert(text);
        }
    }
    let mut seen = HashSet::new();
    let partial = out.with_extension("partial");
    let mut file = std::io::BufWriter::new(
        std::fs::File::create(&partial).map_err(|e| format!("{}: {e}", partial.display()))?,
    );
    for (package, text) in by_package {
        if text.len() < MIN_PARAGRAPH_CHARS || !seen.insert(text.clone()) {
            continue;
        }
        let line = serde_json::json!({ "id": package, "text": text });
        writeln!(file, "{line}").map_err(|e| e.to_string())?;
    }
    file.flush().map_err(|e| e.to_string())?;
    drop(file);
    std::fs::rename(&partial, &out).map_err(|e| e.to_string())?;
    Ok(out)
}

/// (package, summary + long description) of every stanza of a Translation index.
fn descriptions(index: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for stanza in index.split("\n\n") {
        let mut package = None;
        let mut lines: Vec<&str> = Vec::new();
        for line in stanza.lines() {
            if let Some(name) = line.strip_prefix("Package:") {
                package = Some(name.trim().to_owned());
            } else if let Some(summary) = line.strip_prefix("Description-en:") {
                lines = vec![summary.trim()];
            } else if !lines.is_empty() && line.starts_with(' ') {
                let body = line.trim();
                lines.push(if body == "." { "" } else { body });
            }
        }
        if let (Some(package), Some((summary, rest))) = (package, lines.split_first()) {
            let rest: Vec<&str> = rest.iter().copied().filter(|l| !l.is_empty()).collect();
            let text = format!("{}. {}", summary.trim_end_matches('.'), rest.join(" "));
            found.push((package, text.trim().to_owned()));
        }
    }
    found
}

/// The corpus's paragraphs, in file order.
pub fn paragraphs(dir: &Path) -> Result<Vec<String>, String> {
    let path = corpus_path(dir);
    let file = std::fs::File::open(&path).map_err(|e| {
        format!(
            "{}: {e} (run `cargo xtask bench`, which makes it)",
            path.display()
        )
    })?;
    std::io::BufReader::new(file)
        .lines()
        .map(|line| {
            let line = line.map_err(|e| e.to_string())?;
            let value: serde_json::Value =
                serde_json::from_str(&line).map_err(|e| format!("bad corpus line: {e}"))?;
            value["text"]
                .as_str()
                .map(str::to_owned)
                .ok_or_else(|| "corpus line without text".to_owned())
        })
        .collect()
}

/// The paragraphs cut into sentences of 30–400 characters, each kept once, in order.
pub fn sentences(paragraphs: &[String]) -> Vec<String> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for paragraph in paragraphs {
        for sentence in paragraph.split_inclusive(". ") {
            let sentence = sentence.trim();
            if (30..=400).contains(&sentence.len()) && seen.insert(sentence) {
                out.push(sentence.to_owned());
            }
        }
    }
    out
}

/// `n` vectors of [`DIMS`] floats, row after row.
#[derive(Debug, Clone)]
pub struct Matrix {
    /// The floats, `n * DIMS` of them.
    pub data: Vec<f32>,
}

impl Matrix {
    /// Rows.
    pub fn len(&self) -> usize {
        self.data.len() / DIMS
    }

    /// Whether it has no row.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// Row `i`.
    pub fn row(&self, i: usize) -> &[f32] {
        &self.data[i * DIMS..(i + 1) * DIMS]
    }
}

/// The embeddings of the first `n` sentences, from the smallest cached file holding at least
/// `n`; `Err` says how to make them.
pub fn embeddings(dir: &Path, n: usize) -> Result<Matrix, String> {
    let path = embeddings_file(dir, n)?;
    let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let data: Vec<f32> = bytes
        .chunks_exact(4)
        .take(n * DIMS)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    Ok(Matrix { data })
}

/// The smallest cached embeddings file holding at least `n` sentences.
pub fn embeddings_file(dir: &Path, n: usize) -> Result<PathBuf, String> {
    let mut best: Option<(usize, PathBuf)> = None;
    for entry in std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))? {
        let path = entry.map_err(|e| e.to_string())?.path();
        let count = path
            .file_name()
            .and_then(|f| f.to_str())
            .and_then(|f| f.strip_prefix("minilm-sentences-"))
            .and_then(|f| f.strip_suffix(".f32"))
            .and_then(|c| c.parse::<usize>().ok());
        if let Some(count) = count.filter(|&c| c >= n) {
            if best.as_ref().is_none_or(|(b, _)| count < *b) {
                best = Some((count, path));
            }
        }
    }
    best.map(|(_, path)| path).ok_or_else(|| {
        format!(
            "no embeddings of {n} sentences in {} (run `cargo xtask bench`, which makes them)",
            dir.display()
        )
    })
}

/// Writes embeddings as the cache file of their count.
pub fn write_embeddings(dir: &Path, vectors: &[Vec<f32>]) -> Result<PathBuf, String> {
    let path = embeddings_path(dir, vectors.len());
    let partial = path.with_extension("partial");
    let mut bytes = Vec::with_capacity(vectors.len() * DIMS * 4);
    for v in vectors {
        assert_eq!(v.len(), DIMS, "all-MiniLM-L6-v2 vectors have {DIMS} dims");
        for x in v {
            bytes.extend_from_slice(&x.to_le_bytes());
        }
    }
    std::fs::write(&partial, bytes).map_err(|e| format!("{}: {e}", partial.display()))?;
    std::fs::rename(&partial, &path).map_err(|e| e.to_string())?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stanzas_become_summary_and_description() {
        let index = "Package: zsh\nDescription-md5: 1\nDescription-en: shell with lots of features.\n Zsh is a UNIX command interpreter.\n .\n It is also useful.\n\nPackage: empty\n";
        assert_eq!(
            descriptions(index),
            [(
                "zsh".to_owned(),
                "shell with lots of features. Zsh is a UNIX command interpreter. It is also useful."
                    .to_owned()
            )]
        );
    }

    #[test]
    fn sentences_are_cut_bounded_and_unique() {
        let paragraphs = vec![
            "Short. This sentence is long enough to be kept as one. And this one is long enough too."
                .to_owned(),
            "This sentence is long enough to be kept as one. Another sentence that is long enough."
                .to_owned(),
        ];
        assert_eq!(
            sentences(&paragraphs),
            [
                "This sentence is long enough to be kept as one.",
                "And this one is long enough too.",
                "Another sentence that is long enough."
            ]
        );
    }
}
