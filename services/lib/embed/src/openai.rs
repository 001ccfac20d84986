//! Any OpenAI-compatible embeddings endpoint (`POST <base>/embeddings`):
//! OpenAI, Hugging Face TEI, Ollama, vLLM, LocalAI.

use mneme_config::OpenAiConfig;
use serde::{Deserialize, Serialize};

use crate::{EmbedError, Embedder, TextKind, normalize};

/// Inputs per request; larger batches are split.
const MAX_INPUTS_PER_REQUEST: usize = 256;

#[derive(Debug)]
pub struct OpenAiEmbedder {
    client: reqwest::Client,
    url: String,
    api_key: Option<String>,
    model: String,
    model_id: String,
    dim: usize,
    send_dimensions: bool,
}

#[derive(Serialize)]
struct Request<'a> {
    model: &'a str,
    input: &'a [String],
    encoding_format: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    dimensions: Option<usize>,
}

#[derive(Deserialize)]
struct Response {
    data: Vec<Item>,
}

#[derive(Deserialize)]
struct Item {
    index: usize,
    embedding: Vec<f32>,
}

impl OpenAiEmbedder {
    pub fn new(config: &OpenAiConfig, dim: usize) -> anyhow::Result<Self> {
        let client = reqwest::Client::builder().timeout(config.timeout).build()?;
        Ok(Self {
            client,
            url: format!("{}/embeddings", config.base_url),
            api_key: config.api_key.as_ref().map(|k| k.expose().to_owned()),
            model_id: format!("openai:{}:{dim}", config.model),
            model: config.model.clone(),
            dim,
            send_dimensions: config.send_dimensions,
        })
    }

    async fn embed_chunk(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let body = Request {
            model: &self.model,
            input: texts,
            encoding_format: "float",
            dimensions: self.send_dimensions.then_some(self.dim),
        };
        let mut request = self.client.post(&self.url).json(&body);
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key);
        }
        let response = request
            .send()
            .await
            .map_err(|e| EmbedError::Unavailable(format!("request to {} failed: {e}", self.url)))?;
        let status = response.status();
        if !status.is_success() {
            let text = response.text().await.unwrap_or_default();
            let detail: String = text.chars().take(300).collect();
            let message = format!("{} answered {status}: {detail}", self.url);
            return Err(if status.is_server_error() || status.as_u16() == 429 {
                EmbedError::Unavailable(message)
            } else {
                EmbedError::Failed(message)
            });
        }
        let mut parsed: Response = response.json().await.map_err(|e| {
            EmbedError::Failed(format!("unexpected response from {}: {e}", self.url))
        })?;
        if parsed.data.len() != texts.len() {
            return Err(EmbedError::Failed(format!(
                "{} returned {} embeddings for {} inputs",
                self.url,
                parsed.data.len(),
                texts.len()
            )));
        }
        parsed.data.sort_by_key(|item| item.index);
        parsed
            .data
            .into_iter()
            .map(|mut item| {
                if item.embedding.len() != self.dim {
                    return Err(EmbedError::Failed(format!(
                        "{} returned {} dimensions, expected {}",
                        self.url,
                        item.embedding.len(),
                        self.dim
                    )));
                }
                normalize(&mut item.embedding);
                Ok(item.embedding)
            })
            .collect()
    }
}

#[async_trait::async_trait]
impl Embedder for OpenAiEmbedder {
    fn model_id(&self) -> &str {
        &self.model_id
    }

    fn dimension(&self) -> usize {
        self.dim
    }

    async fn embed(&self, texts: &[String], _kind: TextKind) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut out = Vec::with_capacity(texts.len());
        for chunk in texts.chunks(MAX_INPUTS_PER_REQUEST) {
            out.extend(self.embed_chunk(chunk).await?);
        }
        Ok(out)
    }
}
