//! The memtomem pipeline end to end on a small slice of the corpus: the
//! 32 caching chunks (English and Korean), two portfolio queries, and two
//! queries that copy one chunk's body, which must come back first; and the
//! same among a haystack of generated memories.
//!
//! Needs the environment of `~/.local/share/mneme/env` (database, Redis,
//! e5 model) and the bench data (`MNEME_BENCH_DATA`, default
//! `/work/shared/bench`).

use std::collections::HashSet;
use std::path::PathBuf;

use mneme_bench::data::{Corpus, Query};
use mneme_bench::generated;
use mneme_bench::harness::HAYSTACK_SEED;
use mneme_bench::memtomem::{self, Options};

fn corpus_dir() -> PathBuf {
    let root = std::env::var("MNEME_BENCH_DATA").unwrap_or_else(|_| "/work/shared/bench".into());
    PathBuf::from(root).join("memtomem-corpus-v2")
}

/// A query whose text is one chunk's body without its heading.
fn copy_of(corpus: &Corpus, chunk_id: &str, query_id: &str) -> Query {
    let chunk = corpus
        .chunks
        .iter()
        .find(|c| c.id == chunk_id)
        .unwrap_or_else(|| panic!("chunk {chunk_id} is in the corpus"));
    Query {
        id: query_id.into(),
        text: chunk.text.clone(),
        targets: chunk.primary.clone(),
        kind: "copy".into(),
        lang: chunk.lang.clone(),
        genre: None,
    }
}

#[tokio::test]
async fn a_query_copying_a_chunk_ranks_it_first_in_english_and_korean() {
    let full = Corpus::load(&corpus_dir()).expect("the memtomem corpus loads");
    let mut corpus = Corpus {
        chunks: full
            .chunks
            .iter()
            .filter(|c| c.topic == "caching")
            .cloned()
            .collect(),
        queries: full
            .queries
            .iter()
            .filter(|q| q.id == "q000" || q.id == "q050")
            .cloned()
            .collect(),
    };
    assert_eq!(corpus.chunks.len(), 32);
    assert_eq!(corpus.queries.len(), 2);
    corpus
        .queries
        .push(copy_of(&full, "en/caching/adr#1", "copy-en"));
    corpus
        .queries
        .push(copy_of(&full, "ko/caching/troubleshooting#2", "copy-ko"));

    let report = memtomem::run(&corpus, &Options::default())
        .await
        .expect("the benchmark runs");

    assert_eq!(report.ingest.created, 32, "{:#?}", report.ingest);
    assert!(report.ingest.rejected.is_empty(), "{:#?}", report.ingest);
    assert_eq!(report.settings.embedding_dimension, Some(384));
    assert_eq!(report.overall.queries, 4);
    assert_eq!(report.by_language["en"].queries, 2);
    assert_eq!(report.by_language["ko"].queries, 2);
    for (query, chunk) in [
        ("copy-en", "en/caching/adr#1"),
        ("copy-ko", "ko/caching/troubleshooting#2"),
    ] {
        let result = report
            .per_query
            .iter()
            .find(|r| r.id == query)
            .expect("every query has a result");
        assert_eq!(
            result.retrieved.first().map(String::as_str),
            Some(chunk),
            "{result:#?}"
        );
        assert_eq!(result.mrr, 1.0, "{result:#?}");
        assert!(result.recall > 0.0 && result.ndcg > 0.0, "{result:#?}");
    }
    for result in &report.per_query {
        assert!(!result.relevant.is_empty(), "{result:#?}");
        assert_eq!(result.retrieved.len(), memtomem::K, "{result:#?}");
        for metric in [result.recall, result.mrr, result.ndcg] {
            assert!((0.0..=1.0).contains(&metric), "{result:#?}");
        }
    }
    // Every miss has its top 10 and its missing chunks listed.
    for miss in &report.misses {
        assert_eq!(miss.top10.len(), memtomem::K);
        assert!(!miss.missing.is_empty(), "{miss:#?}");
    }
}

#[tokio::test]
async fn haystack_memories_keep_their_rank_and_are_never_relevant() {
    const HAYSTACK: usize = 100;
    let full = Corpus::load(&corpus_dir()).expect("the memtomem corpus loads");
    let chunks: Vec<_> = full
        .chunks
        .iter()
        .filter(|c| c.topic == "caching" && c.lang == "en")
        .cloned()
        .collect();
    let buried = (0..HAYSTACK as u64)
        .map(|i| generated::memory(HAYSTACK_SEED, 0, i))
        .find(|m| m.language == generated::Language::English)
        .expect("most generated memories are in English");
    let corpus = Corpus {
        chunks,
        queries: vec![
            copy_of(&full, "en/caching/adr#1", "copy-chunk"),
            Query {
                id: "copy-haystack".into(),
                text: buried.content.clone(),
                targets: Vec::new(),
                kind: "copy".into(),
                lang: "en".into(),
                genre: None,
            },
        ],
    };
    let options = Options {
        haystack: HAYSTACK,
        ..Options::default()
    };

    let report = memtomem::run(&corpus, &options)
        .await
        .expect("the benchmark runs");

    let distinct: HashSet<String> = (0..HAYSTACK as u64)
        .map(|i| generated::memory(HAYSTACK_SEED, 0, i).content)
        .collect();
    assert_eq!(report.haystack, distinct.len());
    assert_eq!(report.ingest.created, 16, "the haystack is not the corpus");
    let result = |id: &str| {
        report
            .per_query
            .iter()
            .find(|r| r.id == id)
            .expect("every query has a result")
    };
    let chunk = result("copy-chunk");
    assert_eq!(chunk.retrieved[0], "en/caching/adr#1", "{chunk:#?}");
    assert_eq!(chunk.mrr, 1.0);
    // The generated memory is found first, under a haystack id, and counts
    // for nothing.
    let haystack = result("copy-haystack");
    assert!(
        haystack.retrieved[0].starts_with(memtomem::HAYSTACK_PREFIX),
        "{haystack:#?}"
    );
    assert!(haystack.relevant.is_empty());
    assert_eq!(
        (haystack.recall, haystack.mrr, haystack.ndcg),
        (0.0, 0.0, 0.0)
    );
    let corpus_ids: HashSet<&str> = corpus.chunks.iter().map(|c| c.id.as_str()).collect();
    for result in &report.per_query {
        assert_eq!(result.retrieved.len(), memtomem::K, "{result:#?}");
        for id in &result.retrieved {
            assert!(
                corpus_ids.contains(id.as_str()) || id.starts_with(memtomem::HAYSTACK_PREFIX),
                "{id}"
            );
        }
    }
}
