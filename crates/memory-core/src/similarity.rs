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
    /// The score of `a` against `b` under this metric.
    pub fn score(self, a: &[f32], b: &[f32]) -> f32 {
        match self {
            Self::Cosine => cosine(a, b),
            Self::Dot => dot(a, b),
            Self::Euclidean => 1.0 / (1.0 + l2_squared(a, b).sqrt()),
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

/// Cosine similarity; 0 when either vector is zero.
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let denominator = norm(a) * norm(b);
    if denominator == 0.0 {
        0.0
    } else {
        dot(a, b) / denominator
    }
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
