//! Typed metadata filters: the AST every backend compiles (to bound SQL parameters, Lua
//! arguments, …) and the reference evaluator that defines their meaning.

use std::cmp::Ordering;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{MemoryError, Result};
use crate::message::Metadata;
use crate::scope::validate_identifier;

/// Deepest nesting of `and`/`or`/`not` accepted.
pub const MAX_FILTER_DEPTH: usize = 32;

/// A path into a metadata object: `["a", "b"]` reads `metadata.a.b`.
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct FieldPath(Vec<String>);

impl FieldPath {
    /// A path from its segments.
    pub fn new<I, S>(segments: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self(segments.into_iter().map(Into::into).collect())
    }

    /// A path from dotted text: `"a.b"` is `["a", "b"]`. Use [`FieldPath::new`] for keys that
    /// contain dots.
    pub fn parse(dotted: &str) -> Self {
        Self(dotted.split('.').map(str::to_owned).collect())
    }

    /// The segments.
    pub fn segments(&self) -> &[String] {
        &self.0
    }

    /// The value at this path, if every segment exists.
    pub fn resolve<'a>(&self, metadata: &'a Metadata) -> Option<&'a Value> {
        let (first, rest) = self.0.split_first()?;
        let mut value = metadata.get(first)?;
        for segment in rest {
            value = value.as_object()?.get(segment)?;
        }
        Some(value)
    }

    fn validate(&self) -> Result<()> {
        if self.0.is_empty() {
            return Err(MemoryError::invalid(
                "filter path must have at least one segment",
            ));
        }
        self.0
            .iter()
            .try_for_each(|s| validate_identifier("filter path segment", s))
    }
}

impl From<&str> for FieldPath {
    fn from(dotted: &str) -> Self {
        Self::parse(dotted)
    }
}

impl fmt::Debug for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0.join("."))
    }
}

/// A scalar a filter compares against.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum FilterValue {
    /// A boolean.
    Bool(bool),
    /// A number (finite); compared numerically, so `1` equals `1.0`.
    Number(f64),
    /// A string; ordered by Unicode code point (byte-wise UTF-8, SQL `COLLATE "C"`).
    String(String),
}

impl FilterValue {
    /// Whether a stored JSON value equals this scalar (same type, equal value).
    pub fn matches(&self, value: &Value) -> bool {
        match (self, value) {
            (Self::Bool(a), Value::Bool(b)) => a == b,
            (Self::Number(a), Value::Number(b)) => b.as_f64() == Some(*a),
            (Self::String(a), Value::String(b)) => a == b,
            _ => false,
        }
    }

    /// Orders a stored JSON value against this scalar; `None` when the types differ.
    pub fn compare(&self, value: &Value) -> Option<Ordering> {
        match (self, value) {
            (Self::Number(bound), Value::Number(v)) => v.as_f64()?.partial_cmp(bound),
            (Self::String(bound), Value::String(v)) => Some(v.as_str().cmp(bound.as_str())),
            _ => None,
        }
    }

    fn validate(&self) -> Result<()> {
        match self {
            Self::Number(n) if !n.is_finite() => {
                Err(MemoryError::invalid("filter numbers must be finite"))
            }
            Self::String(s) if s.contains('\0') => {
                Err(MemoryError::invalid("filter strings must not contain NUL"))
            }
            _ => Ok(()),
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Self::Bool(_) => "bool",
            Self::Number(_) => "number",
            Self::String(_) => "string",
        }
    }
}

impl From<&str> for FilterValue {
    fn from(v: &str) -> Self {
        Self::String(v.to_owned())
    }
}
impl From<String> for FilterValue {
    fn from(v: String) -> Self {
        Self::String(v)
    }
}
impl From<f64> for FilterValue {
    fn from(v: f64) -> Self {
        Self::Number(v)
    }
}
impl From<i64> for FilterValue {
    fn from(v: i64) -> Self {
        Self::Number(v as f64)
    }
}
impl From<i32> for FilterValue {
    fn from(v: i32) -> Self {
        Self::Number(f64::from(v))
    }
}
impl From<bool> for FilterValue {
    fn from(v: bool) -> Self {
        Self::Bool(v)
    }
}

/// Which bound of a range a builder method sets.
#[derive(Clone, Copy)]
enum Bound {
    Gt,
    Gte,
    Lt,
    Lte,
}

/// A metadata filter.
///
/// Semantics (every backend must match [`Filter::matches`] exactly):
/// - `Eq`: the field exists and equals the value (same JSON type; numbers numerically).
/// - `Ne`: exactly `Not(Eq)`: a missing field or one of another type matches.
/// - `In`: `Eq` with any of the values; an empty list matches nothing.
/// - `Range`: the field has the bounds' type (number or string) and lies within every bound.
/// - `Exists`: the field is present (a JSON `null` counts as present).
/// - `And([])` matches everything, `Or([])` nothing.
///
/// ```
/// use mnemix_core::Filter;
/// let f = Filter::and([Filter::eq("lang", "en"), Filter::range("year").gte(2020)]);
/// let meta = serde_json::json!({"lang": "en", "year": 2024});
/// assert!(f.matches(meta.as_object().unwrap()));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Filter {
    /// Field equals value.
    Eq {
        /// Field path.
        path: FieldPath,
        /// Value.
        value: FilterValue,
    },
    /// Not (field equals value).
    Ne {
        /// Field path.
        path: FieldPath,
        /// Value.
        value: FilterValue,
    },
    /// Field equals one of the values.
    In {
        /// Field path.
        path: FieldPath,
        /// Values.
        values: Vec<FilterValue>,
    },
    /// Field within bounds.
    Range {
        /// Field path.
        path: FieldPath,
        /// Exclusive lower bound.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        gt: Option<FilterValue>,
        /// Inclusive lower bound.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        gte: Option<FilterValue>,
        /// Exclusive upper bound.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lt: Option<FilterValue>,
        /// Inclusive upper bound.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lte: Option<FilterValue>,
    },
    /// Field present.
    Exists {
        /// Field path.
        path: FieldPath,
    },
    /// All of.
    And {
        /// Operands.
        filters: Vec<Filter>,
    },
    /// Any of.
    Or {
        /// Operands.
        filters: Vec<Filter>,
    },
    /// Negation.
    Not {
        /// Operand.
        filter: Box<Filter>,
    },
}

impl Filter {
    /// `path == value`.
    pub fn eq(path: impl Into<FieldPath>, value: impl Into<FilterValue>) -> Self {
        Self::Eq {
            path: path.into(),
            value: value.into(),
        }
    }

    /// `path != value` (missing fields match).
    pub fn ne(path: impl Into<FieldPath>, value: impl Into<FilterValue>) -> Self {
        Self::Ne {
            path: path.into(),
            value: value.into(),
        }
    }

    /// `path` in `values`.
    pub fn any_of<V: Into<FilterValue>>(
        path: impl Into<FieldPath>,
        values: impl IntoIterator<Item = V>,
    ) -> Self {
        Self::In {
            path: path.into(),
            values: values.into_iter().map(Into::into).collect(),
        }
    }

    /// An unbounded range on `path`; add bounds with [`gt`](Self::gt), [`gte`](Self::gte), …
    pub fn range(path: impl Into<FieldPath>) -> Self {
        Self::Range {
            path: path.into(),
            gt: None,
            gte: None,
            lt: None,
            lte: None,
        }
    }

    /// `path` is present.
    pub fn exists(path: impl Into<FieldPath>) -> Self {
        Self::Exists { path: path.into() }
    }

    /// All of the filters.
    pub fn and(filters: impl IntoIterator<Item = Filter>) -> Self {
        Self::And {
            filters: filters.into_iter().collect(),
        }
    }

    /// Any of the filters.
    pub fn or(filters: impl IntoIterator<Item = Filter>) -> Self {
        Self::Or {
            filters: filters.into_iter().collect(),
        }
    }

    /// The negation.
    #[allow(clippy::should_implement_trait)]
    pub fn not(filter: Filter) -> Self {
        Self::Not {
            filter: Box::new(filter),
        }
    }

    fn with_bound(mut self, bound: Bound, value: FilterValue) -> Self {
        if let Self::Range {
            gt, gte, lt, lte, ..
        } = &mut self
        {
            let slot = match bound {
                Bound::Gt => gt,
                Bound::Gte => gte,
                Bound::Lt => lt,
                Bound::Lte => lte,
            };
            *slot = Some(value);
        }
        self
    }

    /// Adds an exclusive lower bound to a range (no effect on other filters).
    #[must_use]
    pub fn gt(self, v: impl Into<FilterValue>) -> Self {
        self.with_bound(Bound::Gt, v.into())
    }

    /// Adds an inclusive lower bound to a range.
    #[must_use]
    pub fn gte(self, v: impl Into<FilterValue>) -> Self {
        self.with_bound(Bound::Gte, v.into())
    }

    /// Adds an exclusive upper bound to a range.
    #[must_use]
    pub fn lt(self, v: impl Into<FilterValue>) -> Self {
        self.with_bound(Bound::Lt, v.into())
    }

    /// Adds an inclusive upper bound to a range.
    #[must_use]
    pub fn lte(self, v: impl Into<FilterValue>) -> Self {
        self.with_bound(Bound::Lte, v.into())
    }

    /// Checks the filter is well formed: valid paths, finite numbers, ranges with at least one
    /// bound of a single orderable type (number or string), nesting at most 32 deep.
    pub fn validate(&self) -> Result<()> {
        self.validate_at(0)
    }

    fn validate_at(&self, depth: usize) -> Result<()> {
        if depth > MAX_FILTER_DEPTH {
            return Err(MemoryError::invalid(format!(
                "filter nests deeper than {MAX_FILTER_DEPTH}"
            )));
        }
        match self {
            Self::Eq { path, value } | Self::Ne { path, value } => {
                path.validate()?;
                value.validate()
            }
            Self::In { path, values } => {
                path.validate()?;
                values.iter().try_for_each(FilterValue::validate)
            }
            Self::Range {
                path,
                gt,
                gte,
                lt,
                lte,
            } => {
                path.validate()?;
                let bounds: Vec<&FilterValue> = [gt, gte, lt, lte].into_iter().flatten().collect();
                let Some(first) = bounds.first() else {
                    return Err(MemoryError::invalid(
                        "range filter needs at least one bound",
                    ));
                };
                if matches!(first, FilterValue::Bool(_)) {
                    return Err(MemoryError::invalid(
                        "range bounds must be numbers or strings",
                    ));
                }
                for bound in &bounds {
                    bound.validate()?;
                    if bound.kind() != first.kind() {
                        return Err(MemoryError::invalid(
                            "range bounds must all have the same type",
                        ));
                    }
                }
                Ok(())
            }
            Self::Exists { path } => path.validate(),
            Self::And { filters } | Self::Or { filters } => {
                filters.iter().try_for_each(|f| f.validate_at(depth + 1))
            }
            Self::Not { filter } => filter.validate_at(depth + 1),
        }
    }

    /// The reference meaning of the filter over a metadata object.
    pub fn matches(&self, metadata: &Metadata) -> bool {
        match self {
            Self::Eq { path, value } => path.resolve(metadata).is_some_and(|v| value.matches(v)),
            Self::Ne { path, value } => !path.resolve(metadata).is_some_and(|v| value.matches(v)),
            Self::In { path, values } => path
                .resolve(metadata)
                .is_some_and(|v| values.iter().any(|want| want.matches(v))),
            Self::Range {
                path,
                gt,
                gte,
                lt,
                lte,
            } => {
                let Some(v) = path.resolve(metadata) else {
                    return false;
                };
                let within = |bound: &Option<FilterValue>, ok: fn(Ordering) -> bool| {
                    bound.as_ref().is_none_or(|b| b.compare(v).is_some_and(ok))
                };
                within(gt, Ordering::is_gt)
                    && within(gte, Ordering::is_ge)
                    && within(lt, Ordering::is_lt)
                    && within(lte, Ordering::is_le)
            }
            Self::Exists { path } => path.resolve(metadata).is_some(),
            Self::And { filters } => filters.iter().all(|f| f.matches(metadata)),
            Self::Or { filters } => filters.iter().any(|f| f.matches(metadata)),
            Self::Not { filter } => !filter.matches(metadata),
        }
    }
}
