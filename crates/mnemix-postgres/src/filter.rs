//! Compiles a core [`Filter`] to a parameterised SQL condition over the `filter` jsonb column,
//! with exactly the meaning of [`Filter::matches`]: paths and values are always bound
//! parameters, never spliced.
//!
//! Every leaf is `true` or `false`, never NULL (so `NOT` means "not matching"); casts sit in
//! `CASE` so a value of another JSON type never reaches them.

use mnemix_core::{FieldPath, Filter, FilterValue};
use tokio_postgres::types::ToSql;

/// A compiled condition and its parameters, numbered from the offset given to [`compile`].
pub(crate) struct SqlFilter {
    pub(crate) condition: String,
    pub(crate) params: Vec<Box<dyn ToSql + Sync + Send>>,
}

/// Compiles `filter` for a statement whose own parameters end at `$offset`.
pub(crate) fn compile(filter: &Filter, offset: usize) -> SqlFilter {
    let mut compiler = Compiler {
        params: Vec::new(),
        offset,
    };
    let condition = compiler.filter(filter);
    SqlFilter {
        condition,
        params: compiler.params,
    }
}

struct Compiler {
    params: Vec<Box<dyn ToSql + Sync + Send>>,
    offset: usize,
}

impl Compiler {
    fn bind(&mut self, value: Box<dyn ToSql + Sync + Send>) -> String {
        self.params.push(value);
        format!("${}", self.offset + self.params.len())
    }

    /// The JSON value at `path`, object keys only (an array is never indexed), SQL NULL when
    /// missing.
    fn value(&mut self, path: &FieldPath) -> String {
        let mut expr = "filter".to_owned();
        for segment in path.segments() {
            let p = self.bind(Box::new(segment.clone()));
            expr = format!("({expr} -> {p}::text)");
        }
        expr
    }

    fn equals(&mut self, v: &str, value: &FilterValue) -> String {
        match value {
            FilterValue::Bool(b) => {
                let p = self.bind(Box::new(*b));
                format!("coalesce({v} = to_jsonb({p}::boolean), false)")
            }
            FilterValue::Number(n) => {
                let p = self.bind(Box::new(*n));
                format!(
                    "coalesce(CASE WHEN jsonb_typeof({v}) = 'number' \
                     THEN ({v})::float8 = {p}::float8 END, false)"
                )
            }
            FilterValue::String(s) => {
                let p = self.bind(Box::new(s.clone()));
                format!(
                    "coalesce(CASE WHEN jsonb_typeof({v}) = 'string' \
                     THEN ({v} #>> '{{}}') = {p}::text END, false)"
                )
            }
        }
    }

    fn filter(&mut self, filter: &Filter) -> String {
        match filter {
            Filter::Eq { path, value } => {
                let v = self.value(path);
                self.equals(&v, value)
            }
            Filter::Ne { path, value } => {
                let v = self.value(path);
                format!("NOT {}", self.equals(&v, value))
            }
            Filter::In { path, values } => {
                if values.is_empty() {
                    return "false".to_owned();
                }
                let v = self.value(path);
                let any: Vec<String> = values.iter().map(|value| self.equals(&v, value)).collect();
                format!("({})", any.join(" OR "))
            }
            Filter::Range {
                path,
                gt,
                gte,
                lt,
                lte,
            } => {
                let v = self.value(path);
                let bounds = [(gt, ">"), (gte, ">="), (lt, "<"), (lte, "<=")];
                let (kind, cast) = match bounds.iter().find_map(|(b, _)| b.as_ref()) {
                    Some(FilterValue::String(_)) => {
                        ("string", format!("({v} #>> '{{}}') COLLATE \"C\""))
                    }
                    _ => ("number", format!("({v})::float8")),
                };
                let mut checks = Vec::new();
                for (bound, op) in bounds {
                    match bound {
                        Some(FilterValue::Number(n)) => {
                            let p = self.bind(Box::new(*n));
                            checks.push(format!("{cast} {op} {p}::float8"));
                        }
                        Some(FilterValue::String(s)) => {
                            let p = self.bind(Box::new(s.clone()));
                            checks.push(format!("{cast} {op} {p}::text"));
                        }
                        // Validation refuses boolean bounds; a bound of another type than the
                        // first is refused too.
                        Some(FilterValue::Bool(_)) => checks.push("false".to_owned()),
                        None => {}
                    }
                }
                format!(
                    "coalesce(CASE WHEN jsonb_typeof({v}) = '{kind}' THEN {} END, false)",
                    checks.join(" AND ")
                )
            }
            Filter::Exists { path } => format!("({} IS NOT NULL)", self.value(path)),
            Filter::And { filters } => {
                if filters.is_empty() {
                    return "true".to_owned();
                }
                let parts: Vec<String> = filters.iter().map(|f| self.filter(f)).collect();
                format!("({})", parts.join(" AND "))
            }
            Filter::Or { filters } => {
                if filters.is_empty() {
                    return "false".to_owned();
                }
                let parts: Vec<String> = filters.iter().map(|f| self.filter(f)).collect();
                format!("({})", parts.join(" OR "))
            }
            Filter::Not { filter } => format!("(NOT {})", self.filter(filter)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_parameters_and_numbering_starts_after_the_offset() {
        let f = Filter::and([
            Filter::eq("lang", "en'; DROP TABLE x; --"),
            Filter::range("year").gte(2020),
        ]);
        let compiled = compile(&f, 3);
        assert!(
            !compiled.condition.contains("DROP"),
            "{}",
            compiled.condition
        );
        assert!(compiled.condition.contains("$4::text"));
        assert_eq!(compiled.params.len(), 4, "two path segments, two values");
    }
}
