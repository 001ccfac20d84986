//! Feature hashing: a deterministic, dependency-free stand-in for a model.
//!
//! Each search lexeme and each character trigram is hashed into one of `dim`
//! buckets with a hashed sign. Texts sharing words get similar vectors, so
//! tests can exercise the vector layer in microseconds. It understands no
//! meaning and must not be used in production.

use mneme_core::text::Tokenizer;
use sha2::{Digest, Sha256};

use crate::{EmbedError, Embedder, TextKind, normalize};

#[derive(Debug)]
pub struct HashEmbedder {
    dim: usize,
    model_id: String,
    tokenizer: Tokenizer,
}

impl HashEmbedder {
    pub fn new(dim: usize) -> Self {
        Self {
            dim,
            model_id: format!("hash-v1-{dim}"),
            tokenizer: Tokenizer::default(),
        }
    }

    fn add(&self, vector: &mut [f32], feature: &str, weight: f32) {
        let digest = Sha256::digest(feature.as_bytes());
        let bucket =
            u64::from_le_bytes(digest[..8].try_into().expect("8 bytes")) as usize % self.dim;
        let sign = if digest[8] & 1 == 0 { 1.0 } else { -1.0 };
        vector[bucket] += sign * weight;
    }

    /// Embeds one text synchronously.
    pub fn embed_one(&self, text: &str) -> Vec<f32> {
        let mut vector = vec![0.0; self.dim];
        for lexeme in self.tokenizer.lexemes(text) {
            self.add(&mut vector, &lexeme, 1.0);
        }
        let chars: Vec<char> = text.to_lowercase().chars().collect();
        for window in chars.windows(3) {
            let trigram: String = window.iter().collect();
            self.add(&mut vector, &format!("#{trigram}"), 0.3);
        }
        normalize(&mut vector);
        vector
    }
}

#[async_trait::async_trait]
impl Embedder for HashEmbedder {
    fn model_id(&self) -> &str {
        &self.model_id
    }

    fn dimension(&self) -> usize {
        self.dim
    }

    async fn embed(&self, texts: &[String], _kind: TextKind) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(texts.iter().map(|t| self.embed_one(t)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cosine(a: &[f32], b: &[f32]) -> f32 {
        a.iter().zip(b).map(|(x, y)| x * y).sum()
    }

    #[test]
    fn similar_texts_are_closer_than_unrelated_ones() {
        let e = HashEmbedder::new(384);
        let a = e.embed_one("the deploy pipeline failed on friday");
        let b = e.embed_one("deploy pipeline failures on fridays");
        let c = e.embed_one("사용자는 에스프레소를 좋아한다");
        assert!(cosine(&a, &b) > cosine(&a, &c) + 0.2);
        assert!((cosine(&a, &a) - 1.0).abs() < 1e-5);
        assert_eq!(e.embed_one("same text"), e.embed_one("same text"));
    }
}
