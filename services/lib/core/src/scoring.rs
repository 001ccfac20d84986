//! Ranking: fusion of the search layers (Reciprocal Rank Fusion, or a
//! convex combination of their scores), then a final score that blends
//! relevance with importance and recency.

use std::collections::HashMap;
use std::hash::Hash;

/// A retrieval layer of hybrid search.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Layer {
    /// pgvector nearest neighbours of the query embedding.
    Vector,
    /// PostgreSQL full-text match over the fragment lexemes.
    FullText,
    /// Overlap with the fragment's keywords.
    Keyword,
    /// One link away from a fragment another layer found.
    Graph,
}

impl Layer {
    pub const fn as_str(self) -> &'static str {
        match self {
            Layer::Vector => "vector",
            Layer::FullText => "fulltext",
            Layer::Keyword => "keyword",
            Layer::Graph => "graph",
        }
    }
}

/// One layer's ranked result list (best first) and its weight in the fusion.
#[derive(Debug, Clone)]
pub struct RankedList<Id> {
    pub layer: Layer,
    pub weight: f64,
    pub ids: Vec<Id>,
    /// The layer's own score of each id, in the order of `ids` (cosine
    /// similarity, `ts_rank`, keyword overlap; the graph layer joins after the
    /// fusion, through [`spread_activation`]).
    pub scores: Vec<f64>,
}

/// A fused candidate.
#[derive(Debug, Clone, PartialEq)]
pub struct Fused<Id> {
    pub id: Id,
    /// The fused score divided by the best score attainable from the layers
    /// that ran (first with the top score in every one), so it lies in
    /// (0, 1] and stays comparable whether one layer ran or three.
    pub relevance: f64,
    /// The layers that returned this id, in the order of `lists`.
    pub layers: Vec<Layer>,
}

/// How the layers' lists become one relevance.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fusion {
    /// Reciprocal Rank Fusion: `Σ weight / (k + rank)` with 1-based ranks.
    /// Only ranks count: the 10th vector hit adds the same whether it is
    /// nearly as similar as the first or far behind.
    Rrf { k: f64 },
    /// A convex combination of each layer's scores, min-max normalised
    /// within the layer's list: `Σ weight · (s − min) / (max − min)`. Keeps
    /// how far apart the hits of a layer are, which ranks throw away.
    Scores,
}

impl Fusion {
    pub fn fuse<Id: Clone + Eq + Hash>(self, lists: &[RankedList<Id>]) -> Vec<Fused<Id>> {
        match self {
            Fusion::Rrf { k } => rrf_fuse(lists, k),
            Fusion::Scores => score_fuse(lists),
        }
    }
}

/// Reciprocal Rank Fusion: `Σ weight / (k + rank)` with 1-based ranks.
///
/// Candidates are merged by id, so a fragment found by several layers keeps
/// one entry with every layer's contribution (the reference implementation
/// lost such fragments). The output is sorted by relevance, ties broken by
/// the order of first appearance, which keeps the result deterministic.
pub fn rrf_fuse<Id: Clone + Eq + Hash>(lists: &[RankedList<Id>], k: f64) -> Vec<Fused<Id>> {
    let best: f64 = lists
        .iter()
        .filter(|l| !l.ids.is_empty())
        .map(|l| l.weight / (k + 1.0))
        .sum();
    merge(lists, best, |_, list, index| {
        list.weight / (k + (index + 1) as f64)
    })
}

/// [`Fusion::Scores`]. A layer whose hits all score the same counts each
/// of them fully; a missing or non-finite score (the cosine of an all-zero
/// vector is NaN) counts as the layer's lowest.
pub fn score_fuse<Id: Clone + Eq + Hash>(lists: &[RankedList<Id>]) -> Vec<Fused<Id>> {
    let best: f64 = lists
        .iter()
        .filter(|l| !l.ids.is_empty())
        .map(|l| l.weight)
        .sum();
    let ranges: Vec<(f64, f64)> = lists
        .iter()
        .map(|list| {
            list.scores
                .iter()
                .filter(|s| s.is_finite())
                .fold((f64::INFINITY, f64::NEG_INFINITY), |(low, high), &s| {
                    (low.min(s), high.max(s))
                })
        })
        .collect();
    merge(lists, best, |position, list, index| {
        let (low, high) = ranges[position];
        let score = list
            .scores
            .get(index)
            .copied()
            .filter(|s| s.is_finite())
            .unwrap_or(low);
        let normalised = if high > low {
            (score - low) / (high - low)
        } else {
            1.0
        };
        list.weight * normalised
    })
}

/// Merges `lists` by id, summing `contribution(position of the list, list,
/// index in it)` over the appearances of each id, and divides by `best`.
fn merge<Id: Clone + Eq + Hash>(
    lists: &[RankedList<Id>],
    best: f64,
    contribution: impl Fn(usize, &RankedList<Id>, usize) -> f64,
) -> Vec<Fused<Id>> {
    if best <= 0.0 {
        return Vec::new();
    }
    let mut order: Vec<Id> = Vec::new();
    let mut scores: HashMap<Id, (f64, Vec<Layer>)> = HashMap::new();
    for (position, list) in lists.iter().enumerate() {
        for (index, id) in list.ids.iter().enumerate() {
            let entry = scores.entry(id.clone()).or_insert_with(|| {
                order.push(id.clone());
                (0.0, Vec::new())
            });
            entry.0 += contribution(position, list, index);
            if !entry.1.contains(&list.layer) {
                entry.1.push(list.layer);
            }
        }
    }
    let mut fused: Vec<Fused<Id>> = order
        .into_iter()
        .map(|id| {
            let (score, layers) = scores.remove(&id).expect("every ordered id was scored");
            Fused {
                id,
                relevance: score / best,
                layers,
            }
        })
        .collect();
    // Stable sort keeps first-appearance order among equal scores.
    fused.sort_by(|a, b| b.relevance.total_cmp(&a.relevance));
    fused
}

/// Spreading activation over links, after the fusion of the direct layers:
/// each `(id, activation)` of `activations` (a seed's relevance times the
/// strength of the link that reaches the id, in [0, 1]) adds `weight` times
/// its activation to the id's relevance, capped at 1. An id no layer found
/// joins with that alone, so a neighbour of a weak hit stays weak however
/// strong its link; ids keep their order among equal relevances.
pub fn spread_activation<Id: Clone + Eq + Hash>(
    mut fused: Vec<Fused<Id>>,
    layer: Layer,
    weight: f64,
    activations: &[(Id, f64)],
) -> Vec<Fused<Id>> {
    let mut position: HashMap<Id, usize> = fused
        .iter()
        .enumerate()
        .map(|(index, f)| (f.id.clone(), index))
        .collect();
    for (id, activation) in activations {
        let gain = weight * activation.clamp(0.0, 1.0);
        match position.get(id) {
            Some(&index) => {
                let found = &mut fused[index];
                found.relevance = (found.relevance + gain).min(1.0);
                if !found.layers.contains(&layer) {
                    found.layers.push(layer);
                }
            }
            None => {
                position.insert(id.clone(), fused.len());
                fused.push(Fused {
                    id: id.clone(),
                    relevance: gain.min(1.0),
                    layers: vec![layer],
                });
            }
        }
    }
    fused.sort_by(|a, b| b.relevance.total_cmp(&a.relevance));
    fused
}

/// Weights of the final score. They need not sum to one; the score is only
/// used for ordering.
#[derive(Debug, Clone, PartialEq)]
pub struct ScoreWeights {
    pub relevance: f64,
    pub importance: f64,
    pub recency: f64,
    /// Age at which the recency term halves.
    pub recency_half_life_days: f64,
}

impl Default for ScoreWeights {
    fn default() -> Self {
        Self {
            relevance: 0.75,
            importance: 0.15,
            recency: 0.10,
            recency_half_life_days: 30.0,
        }
    }
}

/// `w_rel·relevance + w_imp·importance + w_rec·2^(−age/half_life)`.
pub fn final_score(relevance: f64, importance: f64, age_days: f64, weights: &ScoreWeights) -> f64 {
    let half_life = weights.recency_half_life_days.max(f64::MIN_POSITIVE);
    let recency = (-age_days.max(0.0) / half_life).exp2();
    weights.relevance * relevance + weights.importance * importance + weights.recency * recency
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(layer: Layer, ids: &[&'static str]) -> RankedList<&'static str> {
        scored(layer, &ids.iter().map(|id| (*id, 1.0)).collect::<Vec<_>>())
    }

    fn scored(layer: Layer, hits: &[(&'static str, f64)]) -> RankedList<&'static str> {
        RankedList {
            layer,
            weight: 1.0,
            ids: hits.iter().map(|(id, _)| *id).collect(),
            scores: hits.iter().map(|(_, score)| *score).collect(),
        }
    }

    #[test]
    fn ids_found_by_several_layers_are_merged_not_lost() {
        // The reference's mergeRRF returned [a, c] for this input, dropping b.
        let fused = rrf_fuse(
            &[
                list(Layer::Keyword, &["b"]),
                list(Layer::FullText, &["a", "b"]),
                list(Layer::Vector, &["b", "c"]),
            ],
            60.0,
        );
        let ids: Vec<_> = fused.iter().map(|f| f.id).collect();
        assert_eq!(ids, vec!["b", "a", "c"]);
        assert_eq!(
            fused[0].layers,
            vec![Layer::Keyword, Layer::FullText, Layer::Vector]
        );
    }

    #[test]
    fn relevance_is_normalised_to_the_best_attainable_score() {
        let fused = rrf_fuse(&[list(Layer::Vector, &["x", "y"])], 60.0);
        assert!((fused[0].relevance - 1.0).abs() < 1e-12);
        assert!((fused[1].relevance - 61.0 / 62.0).abs() < 1e-12);
        assert!(rrf_fuse::<&str>(&[list(Layer::Vector, &[])], 60.0).is_empty());
    }

    #[test]
    fn final_score_prefers_relevance_then_importance_then_recency() {
        let w = ScoreWeights::default();
        let relevant = final_score(1.0, 0.2, 365.0, &w);
        let important = final_score(0.5, 1.0, 0.0, &w);
        assert!(relevant > important);
        assert!(final_score(0.5, 0.5, 0.0, &w) > final_score(0.5, 0.5, 30.0, &w));
        let halved = final_score(0.0, 0.0, 30.0, &w) / final_score(0.0, 0.0, 0.0, &w);
        assert!((halved - 0.5).abs() < 1e-12);
    }

    #[test]
    fn score_fusion_keeps_how_far_apart_a_layers_hits_are() {
        // b is nearly as similar as a, c far behind: by rank alone, b (2nd
        // by vector, 1st by full text) and a (1st, 2nd) tie; by score, b
        // wins, and c gets nothing from the vector layer.
        let lists = [
            scored(Layer::Vector, &[("a", 0.90), ("b", 0.89), ("c", 0.70)]),
            scored(Layer::FullText, &[("b", 0.4), ("a", 0.1)]),
        ];
        let fused = score_fuse(&lists);
        let ids: Vec<_> = fused.iter().map(|f| f.id).collect();
        assert_eq!(ids, vec!["b", "a", "c"]);
        assert!((fused[0].relevance - (0.95 / 2.0 + 0.5)).abs() < 1e-9);
        assert!((fused[1].relevance - 0.5).abs() < 1e-9);
        assert!(fused[2].relevance.abs() < 1e-12);
        let by_rank = rrf_fuse(&lists, 60.0);
        assert!((by_rank[0].relevance - by_rank[1].relevance).abs() < 1e-12);
    }

    #[test]
    fn a_neighbour_gains_its_seeds_relevance_times_the_weight_and_no_more() {
        let fused = score_fuse(&[scored(Layer::Vector, &[("a", 0.9), ("b", 0.8), ("c", 0.5)])]);
        // a: 1.0, b: 0.75, c: 0.0
        let spread = spread_activation(
            fused,
            Layer::Graph,
            0.5,
            &[("c", 0.6), ("n", 1.0), ("m", 0.2), ("b", 2.0)],
        );
        let ranked: Vec<_> = spread
            .iter()
            .map(|f| (f.id, (f.relevance * 1000.0).round() / 1000.0))
            .collect();
        assert_eq!(
            ranked,
            vec![("a", 1.0), ("b", 1.0), ("n", 0.5), ("c", 0.3), ("m", 0.1)],
            "an activation counts at most 1, a relevance at most 1"
        );
        assert_eq!(spread[1].layers, vec![Layer::Vector, Layer::Graph]);
        assert_eq!(spread[2].layers, vec![Layer::Graph]);
        let unchanged = spread_activation(
            vec![Fused {
                id: "a",
                relevance: 0.4,
                layers: vec![Layer::Vector],
            }],
            Layer::Graph,
            0.5,
            &[],
        );
        assert_eq!(unchanged[0].relevance, 0.4);
    }

    #[test]
    fn score_fusion_counts_a_layer_of_equal_scores_fully_and_is_normalised() {
        let fused = score_fuse(&[
            scored(Layer::Vector, &[("x", 0.8), ("y", 0.6)]),
            scored(Layer::Graph, &[("x", 0.5), ("y", 0.5)]),
        ]);
        assert!((fused[0].relevance - 1.0).abs() < 1e-12);
        assert!((fused[1].relevance - 0.5).abs() < 1e-12);
        assert!(score_fuse::<&str>(&[scored(Layer::Vector, &[])]).is_empty());
        let unscorable = score_fuse(&[scored(
            Layer::Vector,
            &[("x", f64::NAN), ("y", 0.7), ("z", 0.6)],
        )]);
        let ids: Vec<_> = unscorable.iter().map(|f| f.id).collect();
        assert_eq!(ids, vec!["y", "x", "z"]);
        assert_eq!(unscorable[1].relevance, 0.0);
        assert_eq!(
            Fusion::Scores.fuse(&[list(Layer::Vector, &["x"])])[0].relevance,
            1.0
        );
    }
}
