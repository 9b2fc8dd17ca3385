//! Facts: what was learned about the subject, recalled for the turn's text and injected as a
//! fenced block within a token budget.

use std::collections::HashSet;

use mnemix_core::{FactId, Namespace, RecallQuery, Result, Scope, ScoredFact};

use crate::config::{check_positive, invalid, FactsConfig, InjectConfig};
use crate::context::user_memory_block;
use crate::explain::FactCandidate;
use crate::Memory;

impl FactsConfig {
    pub(crate) fn validate(&self) -> Result<()> {
        check_positive("facts.max_facts", self.max_facts)?;
        if let Some(namespace) = &self.namespace {
            Namespace::new(namespace.clone()).map_err(|_| {
                invalid(
                    "facts.namespace",
                    format!("{namespace:?} does not match ^[a-z][a-z0-9-]*$"),
                )
            })?;
        }
        Ok(())
    }
}

impl InjectConfig {
    pub(crate) fn validate(&self) -> Result<()> {
        check_positive("inject.limit", self.limit)?;
        if let Some(budget) = self.token_budget {
            check_positive("inject.token_budget", budget)?;
        }
        Ok(())
    }
}

impl Memory {
    /// The scope facts live in: the caller's subject under `facts.namespace` when set.
    pub fn facts_scope(&self, scope: &Scope) -> Scope {
        match &self.facts_namespace {
            Some(namespace) => Scope::from_parts(namespace.clone(), scope.subject().cloned()),
            None => scope.clone(),
        }
    }

    /// The subject's facts recalled for `user_input` (`prepare`'s first round: by its words,
    /// and by its `vector` too when the backend searches vectors) and their fenced block; none
    /// when the tier is off or there is no input.
    pub(crate) async fn recalled_facts(
        &self,
        scope: &Scope,
        user_input: &str,
        vector: Option<&[f32]>,
    ) -> Result<Option<(Vec<ScoredFact>, Option<String>, Vec<FactCandidate>)>> {
        let config = &self.config;
        if !config.facts.enabled || user_input.trim().is_empty() {
            return Ok(None);
        }
        let mut query = RecallQuery::text(user_input)
            .with_limit(config.inject.limit)
            .with_origins(config.facts.origins.iter().copied())
            .with_written_by(config.facts.written_by.iter().cloned());
        query.vector = vector.map(<[f32]>::to_vec);
        let recalled = self.backend.recall(&self.facts_scope(scope), query).await?;
        let weighed: Vec<(FactId, f64, Option<f32>)> = recalled
            .iter()
            .map(|f| (f.fact.id.clone(), f.relevance, f.fact.score))
            .collect();
        let (injected, block) =
            user_memory_block(recalled, config.inject.token_budget, self.tokens.as_ref());
        let kept: HashSet<&FactId> = injected.iter().map(|f| &f.fact.id).collect();
        let candidates = weighed
            .into_iter()
            .map(|(id, relevance, score)| FactCandidate {
                injected: kept.contains(&id),
                id,
                relevance,
                score,
            })
            .collect();
        Ok(Some((injected, block, candidates)))
    }
}
