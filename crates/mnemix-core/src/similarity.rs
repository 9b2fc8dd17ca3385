//! Similarity kernels. Written as eight independent accumulators over `chunks_exact(8)` so the
//! compiler vectorises them (no `unsafe`, no intrinsics); see the `similarity` tests for the
//! agreement with a naive loop.

use serde::{Deserialize, Serialize};

const LANES: usize = 8;

/// How vectors of a collection are compared. Every metric is turned into a *score* where
/// higher means more similar.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// Cosine similarity in [-1, 1]; zero vectors are rejected.
    #[default]
    Cosine,
    /// Dot product.
    Dot,
    /// Euclidean: score `1 / (1 + distance)`, in (0, 1].
    Euclidean,
}

impl Metric {
    /// The score of `a` against `b` under this metric: always finite, cosine in [-1, 1],
    /// Euclidean in (0, 1], for vectors that pass [`check_vector`](crate::vector::check_vector).
    pub fn score(self, a: &[f32], b: &[f32]) -> f32 {
        match self {
            Self::Cosine => cosine(a, b),
            Self::Dot => dot_score(a, b),
            Self::Euclidean => euclidean_score(a, b),
        }
    }

    /// The lowercase name (`"cosine"`, …), as stored by backends.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Cosine => "cosine",
            Self::Dot => "dot",
            Self::Euclidean => "euclidean",
        }
    }

    /// The metric named by [`as_str`](Self::as_str).
    pub fn parse(name: &str) -> Option<Self> {
        [Self::Cosine, Self::Dot, Self::Euclidean]
            .into_iter()
            .find(|m| m.as_str() == name)
    }
}

/// The largest squared norm a stored or query vector may have (`f32::MAX`, a norm of about
/// 1.8e19): then every dot product and distance between two vectors is finite.
pub const MAX_SQUARED_NORM: f64 = f32::MAX as f64;

/// Squared norms at least this large lost nothing that matters to f32 underflow (16,000
/// subnormal squares add up to less than 1e-33), so the fast f32 kernels are exact enough;
/// smaller ones are recomputed in f64.
const SAFE_SQUARED_NORM: f32 = 1e-20;

#[inline]
fn lanes<F: Fn(f32, f32) -> f32>(a: &[f32], b: &[f32], f: F) -> f32 {
    debug_assert_eq!(a.len(), b.len());
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0.0f32; LANES];
    let (a_chunks, b_chunks) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let (a_rest, b_rest) = (a_chunks.remainder(), b_chunks.remainder());
    for (x, y) in a_chunks.zip(b_chunks) {
        for i in 0..LANES {
            acc[i] += f(x[i], y[i]);
        }
    }
    let mut tail = 0.0f32;
    for (x, y) in a_rest.iter().zip(b_rest) {
        tail += f(*x, *y);
    }
    acc.iter().sum::<f32>() + tail
}

/// Dot product.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    lanes(a, b, |x, y| x * y)
}

/// Squared Euclidean distance.
pub fn l2_squared(a: &[f32], b: &[f32]) -> f32 {
    lanes(a, b, |x, y| (x - y) * (x - y))
}

/// Euclidean norm.
pub fn norm(a: &[f32]) -> f32 {
    dot(a, a).sqrt()
}

/// Cosine similarity in [-1, 1]; 0 when either vector is zero. A vector scores exactly 1.0
/// against itself.
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    cosine_with_squared_norms(a, b, dot(a, a), dot(b, b))
}

/// [`cosine`] with both squared norms already computed by [`dot`] (an index keeps its rows').
///
/// The three sums come from the f32 kernels and are combined in f64: a square of an f32 is
/// exact in f64 and the square root of an exact square is exact, so `x·x / √(x·x · x·x)` is
/// exactly 1. Sums that overflowed or lost terms to underflow are recomputed in f64.
pub fn cosine_with_squared_norms(a: &[f32], b: &[f32], a_squared: f32, b_squared: f32) -> f32 {
    let product = dot(a, b);
    let fast = |x: f32| x.is_finite() && x >= SAFE_SQUARED_NORM;
    let (product, a_squared, b_squared) =
        if product.is_finite() && fast(a_squared) && fast(b_squared) {
            (
                f64::from(product),
                f64::from(a_squared),
                f64::from(b_squared),
            )
        } else {
            (dot_f64(a, b), dot_f64(a, a), dot_f64(b, b))
        };
    if a_squared == 0.0 || b_squared == 0.0 {
        return 0.0;
    }
    to_finite_f32((product / (a_squared * b_squared).sqrt()).clamp(-1.0, 1.0))
}

/// The dot-product score: the f32 kernel, recomputed in f64 if it overflowed, held in the
/// finite f32 range (only rounding can take it past `f32::MAX` for checked vectors).
fn dot_score(a: &[f32], b: &[f32]) -> f32 {
    let fast = dot(a, b);
    if fast.is_finite() {
        fast
    } else {
        to_finite_f32(dot_f64(a, b))
    }
}

/// The Euclidean score `1 / (1 + distance)`, in (0, 1]: exactly 1 for equal vectors.
fn euclidean_score(a: &[f32], b: &[f32]) -> f32 {
    let fast = l2_squared(a, b);
    let squared = if fast.is_finite() {
        f64::from(fast)
    } else {
        a.iter()
            .zip(b)
            .map(|(x, y)| (f64::from(*x) - f64::from(*y)).powi(2))
            .sum()
    };
    to_finite_f32(1.0 / (1.0 + squared.sqrt())).max(f32::MIN_POSITIVE)
}

/// Dot product accumulated in f64: no overflow or underflow for any f32 inputs.
pub fn dot_f64(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| f64::from(*x) * f64::from(*y))
        .sum()
}

#[allow(clippy::cast_possible_truncation)] // clamped into f32's finite range first
fn to_finite_f32(x: f64) -> f32 {
    x.clamp(f64::from(f32::MIN), f64::from(f32::MAX)) as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive_dot(a: &[f32], b: &[f32]) -> f64 {
        a.iter()
            .zip(b)
            .map(|(x, y)| f64::from(*x) * f64::from(*y))
            .sum()
    }

    #[test]
    fn kernels_agree_with_naive_loops_on_odd_lengths() {
        for len in [1usize, 7, 8, 9, 31, 384, 385] {
            let a: Vec<f32> = (0..len).map(|i| ((i * 37 % 11) as f32) - 5.0).collect();
            let b: Vec<f32> = (0..len)
                .map(|i| ((i * 13 % 7) as f32) * 0.5 - 1.0)
                .collect();
            assert!(
                (f64::from(dot(&a, &b)) - naive_dot(&a, &b)).abs() < 1e-3,
                "dot len {len}"
            );
            let l2: f64 = a
                .iter()
                .zip(&b)
                .map(|(x, y)| f64::from(x - y).powi(2))
                .sum();
            assert!(
                (f64::from(l2_squared(&a, &b)) - l2).abs() < 1e-2,
                "l2 len {len}"
            );
        }
    }

    #[test]
    fn metric_scores_order_by_similarity() {
        let q = [1.0, 0.0];
        assert!((Metric::Cosine.score(&q, &[2.0, 0.0]) - 1.0).abs() < 1e-6);
        assert!(Metric::Cosine.score(&q, &[0.0, 1.0]).abs() < 1e-6);
        assert!((Metric::Euclidean.score(&q, &q) - 1.0).abs() < 1e-6);
        assert!(Metric::Euclidean.score(&q, &[0.0, 0.0]) < 1.0);
        assert!(cosine(&[0.0, 0.0], &q).abs() < f32::EPSILON);
    }
}
