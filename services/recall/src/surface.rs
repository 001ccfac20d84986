//! Candidates for active surfacing, with a **calibrated relevance**.
//!
//! Recall's fused scores only order one result list (Reciprocal Rank
//! Fusion's top score of 0.03, or a normalised 1.0, says nothing about
//! whether anything is relevant). Surfacing must decide *whether* to show a memory at all, with a
//! threshold that means the same for every tenant and query, so it scores
//! each candidate on its own evidence:
//!
//! - `similarity`: the cosine similarity of query and memory embeddings
//!   (each model has its own range: multilingual-e5 puts unrelated text
//!   near 0.8, MiniLM near 0.1, so the weights are per model);
//! - `lexical`: the share of the query's distinct search lexemes (stems,
//!   Hangul stems and bigrams) found in the memory's content, topic and
//!   keywords.
//!
//! - the margins: how far each stands out from the query's *other*
//!   candidates (minus their medians; a lone candidate is compared with
//!   the model's typical similarity), since a relevant memory is one that
//!   stands out, whatever the query's general similarity level.
//!
//! `relevance = σ(bias + Σ wᵢ · evidenceᵢ)`, a logistic model whose
//! parameters were fitted per model on judged query–memory pairs
//! (docs/SURFACING.md gives the data and the fit), so the relevance is an
//! estimate of the probability that the memory is relevant. A memory in
//! another script than the query keeps `1 − discount` of it
//! ([`ScriptPrior`], as in recall).
//!
//! Candidates come from the vector and full-text layers of recall (the
//! keyword and graph layers add nothing a lone query can use); demoted and
//! excluded memories never come back.

use std::collections::{HashMap, HashSet};

use mneme_core::principal::resolve_agent_id;
use mneme_core::text::Tokenizer;
use mneme_core::{Error, Permission, Principal, Result};
use mneme_embed::PassageRecipe;
use mneme_proto::v1::{SurfaceCandidate, SurfaceRequest, SurfaceResponse};
use mneme_store::fragments::{self, SearchScope};
use mneme_store::{TenantTx, surfacing};
use pgvector::Vector;
use uuid::Uuid;

use crate::RecallServer;
use crate::rank::ScriptPrior;

/// Candidates each layer contributes before scoring.
const PER_LAYER: i64 = 20;
/// Most candidates one request may ask for.
const MAX_LIMIT: u32 = 50;
/// Longest query accepted, in characters.
const MAX_QUERY_CHARS: usize = 2_000;

/// What is known about one candidate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Evidence {
    pub(crate) similarity: Option<f32>,
    pub(crate) lexical: f32,
    /// Similarity minus the median similarity of the query's candidates.
    pub(crate) similarity_margin: f32,
    /// Lexical share minus the median of the query's candidates.
    pub(crate) lexical_margin: f32,
}

/// The logistic calibration of one embedding model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Calibration {
    pub(crate) name: &'static str,
    /// Similarity assumed for a memory without an embedding (the model's
    /// typical similarity between a query and a candidate).
    pub(crate) typical_similarity: f32,
    pub(crate) bias: f32,
    pub(crate) w_similarity: f32,
    pub(crate) w_lexical: f32,
    pub(crate) w_similarity_margin: f32,
    pub(crate) w_lexical_margin: f32,
}

/// Known models, by model-id prefix; the last entry is the fallback. The
/// e5 and hash entries were fitted with
/// `loadtest/bench/scripts/fit_calibration.py` on the memtomem corpus
/// (docs/SURFACING.md); MiniLM and the fallback are priors scaled from e5
/// (their cosines spread about four times wider), not fits.
const CALIBRATIONS: &[(&str, Calibration)] = &[
    (
        "multilingual-e5",
        Calibration {
            name: "e5-v1",
            typical_similarity: 0.84,
            bias: -0.371,
            w_similarity: -1.754,
            w_lexical: 1.145,
            w_similarity_margin: 50.77,
            w_lexical_margin: 0.24,
        },
    ),
    (
        "all-MiniLM",
        Calibration {
            name: "minilm-v1",
            typical_similarity: 0.3,
            bias: -1.1,
            w_similarity: 0.0,
            w_lexical: 1.2,
            w_similarity_margin: 13.0,
            w_lexical_margin: 0.0,
        },
    ),
    (
        // The test embedder hashes tokens: its cosine is lexical overlap.
        "hash",
        Calibration {
            name: "hash-v1",
            typical_similarity: 0.1,
            bias: -1.663,
            w_similarity: -3.781,
            w_lexical: 1.393,
            w_similarity_margin: 10.99,
            w_lexical_margin: 0.825,
        },
    ),
    (
        "",
        Calibration {
            name: "generic-v1",
            typical_similarity: 0.4,
            bias: -1.1,
            w_similarity: 0.0,
            w_lexical: 1.2,
            w_similarity_margin: 13.0,
            w_lexical_margin: 0.0,
        },
    ),
];

/// e5 with passages embedded as `topic: content` (`PassageRecipe::
/// TopicAndContent`): the topic moves every similarity, so e5-v1 (fitted on
/// content-only vectors) would misjudge them.
const E5_TOPIC: Calibration = Calibration {
    name: "e5-topic-v1",
    typical_similarity: 0.84,
    bias: -2.843,
    w_similarity: 1.075,
    w_lexical: 1.934,
    w_similarity_margin: 53.19,
    w_lexical_margin: -0.822,
};

impl Calibration {
    /// The calibration of vectors of `model` computed by `recipe`.
    pub(crate) fn for_vectors(model: &str, recipe: PassageRecipe) -> Calibration {
        match Self::for_model(model) {
            e5 if e5.name == "e5-v1" && recipe == PassageRecipe::TopicAndContent => E5_TOPIC,
            calibration => calibration,
        }
    }

    pub(crate) fn for_model(model: &str) -> Calibration {
        CALIBRATIONS
            .iter()
            .find(|(prefix, _)| model.starts_with(prefix))
            .map(|(_, c)| *c)
            .unwrap_or(CALIBRATIONS[CALIBRATIONS.len() - 1].1)
    }

    /// The calibrated relevance.
    pub(crate) fn relevance(&self, evidence: &Evidence) -> f32 {
        let similarity = evidence.similarity.unwrap_or(self.typical_similarity);
        let logit = self.bias
            + self.w_similarity * similarity
            + self.w_lexical * evidence.lexical
            + self.w_similarity_margin * evidence.similarity_margin
            + self.w_lexical_margin * evidence.lexical_margin;
        1.0 / (1.0 + (-logit).exp())
    }
}

/// The items of `values` other than the one at `index`.
fn others<T>(values: &[T], index: usize) -> impl Iterator<Item = &T> {
    values
        .iter()
        .enumerate()
        .filter(move |(i, _)| *i != index)
        .map(|(_, v)| v)
}

/// The median of `values`, or `fallback` when there are none (a lone
/// candidate is compared with what is typical for the model).
fn median_or(mut values: Vec<f32>, fallback: f32) -> f32 {
    if values.is_empty() {
        return fallback;
    }
    values.sort_by(f32::total_cmp);
    let mid = values.len() / 2;
    if values.len().is_multiple_of(2) {
        (values[mid - 1] + values[mid]) / 2.0
    } else {
        values[mid]
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
        let exclude: Vec<Uuid> = request
            .exclude_ids
            .iter()
            .filter_map(|id| id.parse().ok())
            .collect();

        let model = self.embedder.model_id();
        let calibration = Calibration::for_vectors(model, self.passage_recipe);
        let lexemes = self.tokenizer.query_lexemes(query);
        let query_lexemes: HashSet<String> = lexemes.iter().cloned().collect();

        // The embedding (usually a Redis hit) while a connection is taken;
        // then demotion and the layers pipelined on it.
        let (embedding, client) = tokio::join!(self.query_embedding(query), self.store.client());
        let mut client = client?;
        let tx = TenantTx::begin(&mut client, principal.tenant_id).await?;
        let scope = SearchScope {
            key_ids: &key_ids,
            agent_id: &agent_id,
            workspace: workspace.as_deref(),
            exclude: &exclude,
            ..SearchScope::default()
        };
        let demoted = async {
            if request.demote_after == 0 {
                return Ok::<_, mneme_core::Error>(Vec::new());
            }
            Ok(surfacing::demoted(&tx, principal.key_id, i64::from(request.demote_after)).await?)
        };
        let found = self.surface_candidates(&tx, &scope, embedding.as_ref(), &lexemes);
        let (demoted, found) = tokio::try_join!(demoted, found)?;
        let demoted: HashSet<Uuid> = demoted.into_iter().collect();
        let ids: Vec<Uuid> = found
            .into_iter()
            .filter(|id| !demoted.contains(id))
            .collect();
        let similarity = async {
            match &embedding {
                Some(embedding) if !ids.is_empty() => {
                    fragments::similarities(&tx, &key_ids, &ids, embedding, model).await
                }
                _ => Ok(HashMap::new()),
            }
        };
        let (similarity, rows) =
            tokio::try_join!(similarity, fragments::fetch(&tx, &key_ids, &ids))?;
        tx.commit().await?;
        let demoted_count = demoted.len();

        let min_relevance = request.min_relevance.clamp(0.0, 1.0);
        let script_prior = ScriptPrior::of_query(Some(query), self.settings.other_script_discount);
        let lexical: Vec<f32> = rows
            .iter()
            .map(|row| {
                let text = format!("{} {} {}", row.topic, row.keywords.join(" "), row.content);
                lexical_coverage(&self.tokenizer, &query_lexemes, &text)
            })
            .collect();
        let similarities: Vec<Option<f32>> = rows
            .iter()
            .map(|row| similarity.get(&row.id).copied())
            .collect();
        let mut candidates: Vec<SurfaceCandidate> = rows
            .into_iter()
            .enumerate()
            .map(|(index, row)| {
                let similarity = similarities[index];
                let lexical_share = lexical[index];
                let evidence = Evidence {
                    similarity,
                    lexical: lexical_share,
                    similarity_margin: similarity.map_or(0.0, |s| {
                        let rest = others(&similarities, index).flatten().copied().collect();
                        s - median_or(rest, calibration.typical_similarity)
                    }),
                    lexical_margin: lexical_share
                        - median_or(others(&lexical, index).copied().collect(), 0.0),
                };
                let lexical = lexical_share;
                let script_factor = script_prior.map_or(1.0, |prior| prior.factor(&row.content));
                SurfaceCandidate {
                    id: row.id.to_string(),
                    relevance: calibration.relevance(&evidence) * script_factor as f32,
                    similarity,
                    lexical,
                    similarity_margin: evidence.similarity_margin,
                    lexical_margin: evidence.lexical_margin,
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
        lexemes: &[String],
    ) -> Result<Vec<Uuid>> {
        let model = self.embedder.model_id();
        let ef_search = self.settings.hnsw_ef_search;
        let vector = async {
            let Some(e) = embedding else {
                return Ok::<_, mneme_core::Error>(Vec::new());
            };
            Ok(fragments::vector_search(tx, scope, e, model, ef_search, PER_LAYER).await?)
        };
        let fulltext = async {
            let Some(q) = self.term_stats.query(tx, scope.key_ids, lexemes).await? else {
                return Ok(Vec::new());
            };
            let fields = self.settings.fulltext_fields;
            Ok(
                fragments::fulltext_search(tx, scope, &q.filter, &q.rank, fields, PER_LAYER)
                    .await?,
            )
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
            Calibration::for_vectors("multilingual-e5-small-q4", PassageRecipe::TopicAndContent)
                .name,
            "e5-topic-v1"
        );
        assert_eq!(
            Calibration::for_vectors("multilingual-e5-small-q4", PassageRecipe::Content).name,
            "e5-v1"
        );
        assert_eq!(
            Calibration::for_model("text-embedding-3-small").name,
            "generic-v1"
        );
    }

    #[test]
    fn relevance_is_a_probability_that_grows_with_each_kind_of_evidence() {
        let c = Calibration::for_model("multilingual-e5-small-q4");
        let evidence = |similarity, lexical, margin| Evidence {
            similarity: Some(similarity),
            lexical,
            similarity_margin: margin,
            lexical_margin: 0.0,
        };
        let base = c.relevance(&evidence(0.84, 0.0, 0.0));
        assert!(base > 0.0 && base < 1.0);
        // Standing out from the other candidates is what counts most.
        assert!(c.relevance(&evidence(0.84, 0.0, 0.05)) > base + 0.3);
        assert!(c.relevance(&evidence(0.84, 0.5, 0.0)) > base);
        let missing = Evidence {
            similarity: None,
            ..evidence(0.0, 0.5, 0.0)
        };
        assert_eq!(
            c.relevance(&missing),
            c.relevance(&evidence(c.typical_similarity, 0.5, 0.0))
        );
    }

    #[test]
    fn medians_of_odd_even_and_empty_lists() {
        assert_eq!(median_or(vec![3.0, 1.0, 2.0], 0.0), 2.0);
        assert_eq!(median_or(vec![4.0, 1.0, 2.0, 3.0], 0.0), 2.5);
        assert_eq!(median_or(Vec::new(), 0.7), 0.7);
        let values = [1, 2, 3];
        assert_eq!(others(&values, 1).copied().collect::<Vec<_>>(), vec![1, 3]);
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
