//! Knowledge: shared collections of the caller's namespace searched with the turn's query.

use mnemix_core::adapter::rank_hits;
use mnemix_core::{MemoryError, Result, Scope, VectorHit, VectorQuery};

use crate::config::{check_positive, check_unit, invalid, KnowledgeConfig};
use crate::Memory;

impl KnowledgeConfig {
    pub(crate) fn validate(&self) -> Result<()> {
        check_positive("knowledge.retrieval_limit", self.retrieval_limit)?;
        check_unit("knowledge.similarity_threshold", self.similarity_threshold)?;
        if self.enabled && self.sources.is_empty() {
            return Err(invalid(
                "knowledge.sources",
                "knowledge is enabled but names no source",
            ));
        }
        for source in &self.sources {
            mnemix_core::validate_identifier("knowledge source", source)
                .map_err(|e| invalid("knowledge.sources", e))?;
        }
        Ok(())
    }
}

impl Memory {
    /// Knowledge hits of every source for the query's `vector` (`prepare`'s first round), above
    /// the threshold, best first, limited; none when the tier is off or there is no query.
    pub(crate) async fn knowledge(
        &self,
        scope: &Scope,
        vector: Option<&[f32]>,
    ) -> Result<Vec<VectorHit>> {
        let config = &self.config.knowledge;
        let Some(vector) = vector.filter(|_| config.enabled) else {
            return Ok(Vec::new());
        };
        let shared = Scope::from_parts(scope.namespace().clone(), None);
        let mut hits = Vec::new();
        for source in &config.sources {
            let mut query = VectorQuery::new(vector.to_vec(), config.retrieval_limit);
            query.min_score = Some(config.similarity_threshold);
            match self.backend.search(&shared, source, query).await {
                Ok(found) => hits.extend(found),
                Err(MemoryError::NotFound { .. }) => {
                    return Err(MemoryError::invalid(format!(
                        "memory config: knowledge.sources: {source} is not a collection of namespace {}",
                        scope.namespace()
                    )))
                }
                Err(error) => return Err(error),
            }
        }
        rank_hits(&mut hits);
        hits.truncate(config.retrieval_limit);
        Ok(hits)
    }
}
