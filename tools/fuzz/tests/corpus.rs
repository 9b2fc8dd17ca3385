//! The fuzz targets' checks without AFL++: the committed corpus (what AFL++ kept as covering
//! something new), past findings (`regressions/`), then seeded mutations of the corpus, through
//! every target. A property that a past input or a small mutation breaks fails here, in the
//! workspace's tests.

use std::fs;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use mnemix_fuzz::Target;

/// Mutated inputs per target.
const MUTATIONS: usize = 5_000;

/// The files of `kind/TARGET` (`corpus`: what AFL++ kept; `regressions`: inputs that once
/// failed, kept apart so that minimizing the corpus never drops them).
fn inputs(kind: &str, target: Target) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(kind)
        .join(target.name());
    let Ok(entries) = fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut files: Vec<_> = entries
        .map(|entry| entry.expect("readable entry").path())
        .map(|path| {
            let bytes = fs::read(&path).expect("readable input file");
            (path, bytes)
        })
        .collect();
    files.sort();
    files
}

fn corpus(target: Target) -> Vec<(PathBuf, Vec<u8>)> {
    inputs("corpus", target)
}

fn check(target: Target, input: &[u8], origin: &dyn Fn() -> String) {
    assert!(
        catch_unwind(AssertUnwindSafe(|| target.check(input))).is_ok(),
        "target {} failed on {} (input {:?})",
        target.name(),
        origin(),
        String::from_utf8_lossy(input)
    );
}

#[test]
fn the_committed_corpus_passes_every_target() {
    for target in Target::ALL {
        let files = corpus(target);
        assert!(!files.is_empty(), "the {} corpus is empty", target.name());
        for (path, bytes) in &files {
            check(target, bytes, &|| path.display().to_string());
        }
    }
}

/// Inputs that once failed a target (each file names what it found); the fix must hold.
#[test]
fn past_findings_stay_fixed() {
    let mut replayed = 0;
    for target in Target::ALL {
        for (path, bytes) in &inputs("regressions", target) {
            check(target, bytes, &|| path.display().to_string());
            replayed += 1;
        }
    }
    assert!(replayed > 0, "no regression inputs found");
}

/// Flips, inserts, deletes and splices bytes of corpus files (a little of what AFL++ does).
fn mutate(rng: &mut fastrand::Rng, seed: &[u8], other: &[u8]) -> Vec<u8> {
    let mut input = seed.to_vec();
    for _ in 0..rng.usize(1..=4) {
        let at = rng.usize(0..=input.len());
        match rng.u8(0..4) {
            0 if at < input.len() => input[at] ^= 1 << rng.u8(0..8),
            1 => input.insert(at, rng.u8(..)),
            2 if at < input.len() => {
                input.remove(at);
            }
            _ => {
                let from = rng.usize(0..=other.len());
                input.splice(at..at, other[from..].iter().take(16).copied());
            }
        }
    }
    input
}

#[test]
fn mutations_of_the_corpus_pass_every_target() {
    let mut rng = fastrand::Rng::with_seed(0x00f0_22ed);
    for target in Target::ALL {
        let files = corpus(target);
        for n in 0..MUTATIONS {
            let (seed_path, seed) = &files[rng.usize(..files.len())];
            let (_, other) = &files[rng.usize(..files.len())];
            let input = mutate(&mut rng, seed, other);
            check(target, &input, &|| {
                format!("mutation {n} of {}", seed_path.display())
            });
        }
    }
}
