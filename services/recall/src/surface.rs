//! Candidates for active surfacing, with a **calibrated relevance**.
//!
//! Recall ranks by Reciprocal Rank Fusion, whose scores only order one
//! result list: a top score of 0.03 says nothing about whether anything is
//! relevant. Surfacing must decide *whether* to show a memory at all, with a
//! threshold that means the same for every tenant and query, so it scores
//! each candidate on its own evidence:
//!
//! - `similarity`: the cosine similarity of query and memory embeddings,
//!   standardised per embedding model (`(cos − center) / scale`), because
//!   each model has its own cosine range (multilingual-e5 puts unrelated
//!   text near 0.78, MiniLM near 0.1);
//! - `lexical`: the share of the query's distinct search lexemes (stems,
//!   Hangul stems and bigrams) found in the memory's content, topic and
//!   keywords.
//!
//! `relevance = σ(bias + w_sim · z + w_lex · lexical)`, a logistic model
//! whose parameters were fitted per model on labelled query–memory pairs
//! (docs/SURFACING.md gives the data and the fit), so the relevance is an
//! estimate of the probability that the memory is relevant.
//!
//! Candidates come from the vector and full-text layers of recall (the
//! keyword and graph layers add nothing a lone query can use); demoted and
//! excluded memories never come back.

use std::collections::{HashMap, HashSet};

use mneme_core::principal::resolve_agent_id;
use mneme_core::text::Tokenizer;
use mneme_core::{Error, Permission, Principal, Result};
use mneme_proto::v1::{SurfaceCandidate, SurfaceRequest, SurfaceResponse};
use mneme_store::fragments::{self, SearchScope};
use mneme_store::{TenantTx, surfacing};
use pgvector::Vector;
use uuid::Uuid;

use crate::RecallServer;

/// Candidates each layer contributes before scoring.
const PER_LAYER: i64 = 20;
/// Most candidates one request may ask for.
const MAX_LIMIT: u32 = 50;
/// Longest query accepted, in characters.
const MAX_QUERY_CHARS: usize = 2_000;

/// The logistic calibration of one embedding model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Calibration {
    pub(crate) name: &'static str,
    /// Cosine similarity that counts as "average" for the model.
    pub(crate) center: f32,
    /// Cosine difference that counts as one unit of evidence.
    pub(crate) scale: f32,
    pub(crate) bias: f32,
    pub(crate) w_similarity: f32,
    pub(crate) w_lexical: f32,
}

/// Known models, by model-id prefix; the last entry is the fallback.
const CALIBRATIONS: &[(&str, Calibration)] = &[
    (
        "multilingual-e5",
        Calibration {
            name: "e5-v1",
            center: 0.80,
            scale: 0.03,
            bias: -1.6,
            w_similarity: 1.3,
            w_lexical: 3.0,
        },
    ),
    (
        "all-MiniLM",
        Calibration {
            name: "minilm-v1",
            center: 0.35,
            scale: 0.12,
            bias: -1.6,
            w_similarity: 1.3,
            w_lexical: 3.0,
        },
    ),
    (
        // The test embedder hashes tokens: its cosine is lexical overlap.
        "hash",
        Calibration {
            name: "hash-v1",
            center: 0.25,
            scale: 0.15,
            bias: -1.6,
            w_similarity: 1.0,
            w_lexical: 3.0,
        },
    ),
    (
        "",
        Calibration {
            name: "generic-v1",
            center: 0.40,
            scale: 0.10,
            bias: -1.6,
            w_similarity: 1.3,
            w_lexical: 3.0,
        },
    ),
];

impl Calibration {
    pub(crate) fn for_model(model: &str) -> Calibration {
        CALIBRATIONS
            .iter()
            .find(|(prefix, _)| model.starts_with(prefix))
            .map(|(_, c)| *c)
            .unwrap_or(CALIBRATIONS[CALIBRATIONS.len() - 1].1)
    }

    /// The calibrated relevance; a memory without an embedding is judged
    /// on its lexical evidence alone (as if its similarity were average).
    pub(crate) fn relevance(&self, similarity: Option<f32>, lexical: f32) -> f32 {
        let z = similarity.map_or(0.0, |s| (s - self.center) / self.scale);
        let logit = self.bias + self.w_similarity * z + self.w_lexical * lexical;
        1.0 / (1.0 + (-logit).exp())
    }
}

/// Share of the query's distinct lexemes present in `text`.
pub(crate) fn lexical_coverage(tokenizer: &Tokenizer, query: &HashSet<String>, text: &str) -> f32 {
    if query.is_empty() {
        return 0.0;
    }
    let found: HashSet<String> = tokenizer.lexemes(text).into_iter().collect();
    query.iter().filter(|l| found.contains(*l)).count() as f32 / query.len() as f32
}

impl RecallServer {
    pub(crate) async fn surface(
        &self,
        principal: &Principal,
        request: SurfaceRequest,
    ) -> Result<SurfaceResponse> {
        principal.require(Permission::Read)?;
        let query = request.query.trim();
        if query.is_empty() {
            return Err(Error::invalid_argument("query must not be empty"));
        }
        if query.chars().count() > MAX_QUERY_CHARS {
            return Err(Error::invalid_argument(format!(
                "query is longer than {MAX_QUERY_CHARS} characters"
            )));
        }
        let limit = request.limit.clamp(1, MAX_LIMIT) as usize;
        let agent_id = resolve_agent_id(request.agent_id.as_deref(), principal)?;
        let workspace = request
            .workspace
            .as_deref()
            .map(str::trim)
            .filter(|w| !w.is_empty())
            .map(str::to_owned)
            .or_else(|| principal.workspace.clone());
        let key_ids = principal.readable_key_ids();
        let mut exclude: Vec<Uuid> = request
            .exclude_ids
            .iter()
            .filter_map(|id| id.parse().ok())
            .collect();

        let model = self.embedder.model_id();
        let calibration = Calibration::for_model(model);
        let embedding = self.query_embedding(query).await;
        let tsquery = self.tokenizer.tsquery_literal(query);
        let query_lexemes: HashSet<String> = self.tokenizer.lexemes(query).into_iter().collect();

        let mut client = self.store.client().await?;
        let tx = TenantTx::begin(&mut client, principal.tenant_id).await?;
        let mut demoted_count = 0;
        if request.demote_after > 0 {
            let demoted =
                surfacing::demoted(&tx, principal.key_id, i64::from(request.demote_after)).await?;
            demoted_count = demoted.len();
            exclude.extend(demoted);
        }
        let scope = SearchScope {
            key_ids: &key_ids,
            agent_id: &agent_id,
            workspace: workspace.as_deref(),
            exclude: &exclude,
            ..SearchScope::default()
        };
        let ids = self
            .surface_candidates(&tx, &scope, embedding.as_ref(), tsquery.as_deref())
            .await?;
        let similarity: HashMap<Uuid, f32> = match &embedding {
            Some(embedding) if !ids.is_empty() => {
                fragments::similarities(&tx, &key_ids, &ids, embedding, model).await?
            }
            _ => HashMap::new(),
        };
        let rows = fragments::fetch(&tx, &key_ids, &ids).await?;
        tx.commit().await?;

        let min_relevance = request.min_relevance.clamp(0.0, 1.0);
        let mut candidates: Vec<SurfaceCandidate> = rows
            .into_iter()
            .map(|row| {
                let similarity = similarity.get(&row.id).copied();
                let text = format!("{} {} {}", row.topic, row.keywords.join(" "), row.content);
                let lexical = lexical_coverage(&self.tokenizer, &query_lexemes, &text);
                SurfaceCandidate {
                    id: row.id.to_string(),
                    relevance: calibration.relevance(similarity, lexical),
                    similarity,
                    lexical,
                    content: row.content,
                    topic: row.topic,
                    r#type: row.fragment_type,
                    source: row.source,
                }
            })
            .filter(|c| c.relevance >= min_relevance)
            .collect();
        candidates.sort_by(|a, b| {
            b.relevance
                .total_cmp(&a.relevance)
                .then_with(|| a.id.cmp(&b.id))
        });
        candidates.truncate(limit);
        Ok(SurfaceResponse {
            candidates,
            calibration: format!("{model}/{}", calibration.name),
            demoted: u32::try_from(demoted_count).unwrap_or(u32::MAX),
        })
    }

    /// Ids found by the vector and full-text layers, deduplicated.
    async fn surface_candidates(
        &self,
        tx: &TenantTx<'_>,
        scope: &SearchScope<'_>,
        embedding: Option<&Vector>,
        tsquery: Option<&str>,
    ) -> Result<Vec<Uuid>> {
        let model = self.embedder.model_id();
        let ef_search = self.settings.hnsw_ef_search;
        let vector = async {
            match embedding {
                Some(e) => {
                    fragments::vector_search(tx, scope, e, model, ef_search, PER_LAYER).await
                }
                None => Ok(Vec::new()),
            }
        };
        let fulltext = async {
            match tsquery {
                Some(q) => fragments::fulltext_search(tx, scope, q, PER_LAYER).await,
                None => Ok(Vec::new()),
            }
        };
        let (vector, fulltext) = tokio::try_join!(vector, fulltext)?;
        let mut seen = HashSet::new();
        Ok(vector
            .into_iter()
            .chain(fulltext)
            .map(|hit| hit.id)
            .filter(|id| seen.insert(*id))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn models_pick_their_calibration_by_prefix() {
        assert_eq!(
            Calibration::for_model("multilingual-e5-small-q4").name,
            "e5-v1"
        );
        assert_eq!(Calibration::for_model("all-MiniLM-L6-v2").name, "minilm-v1");
        assert_eq!(
            Calibration::for_model("text-embedding-3-small").name,
            "generic-v1"
        );
    }

    #[test]
    fn relevance_is_a_probability_that_grows_with_each_kind_of_evidence() {
        let c = Calibration::for_model("multilingual-e5-small-q4");
        let base = c.relevance(Some(0.80), 0.0);
        assert!(base > 0.0 && base < 0.5);
        assert!(c.relevance(Some(0.86), 0.0) > base);
        assert!(c.relevance(Some(0.80), 0.5) > base);
        assert!(c.relevance(Some(0.95), 1.0) < 1.0);
        assert!(c.relevance(Some(0.70), 0.0) > 0.0);
        assert_eq!(c.relevance(None, 0.5), c.relevance(Some(c.center), 0.5));
    }

    #[test]
    fn lexical_coverage_counts_distinct_query_lexemes() {
        let tokenizer = Tokenizer::default();
        let query: HashSet<String> = tokenizer
            .lexemes("redis eviction policy")
            .into_iter()
            .collect();
        assert_eq!(
            lexical_coverage(&tokenizer, &query, "Redis eviction with LRU"),
            2.0 / 3.0
        );
        assert_eq!(
            lexical_coverage(&tokenizer, &query, "nothing in common"),
            0.0
        );
        assert_eq!(
            lexical_coverage(&tokenizer, &HashSet::new(), "anything"),
            0.0
        );
    }
}
