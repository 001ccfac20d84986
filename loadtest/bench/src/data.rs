//! The two datasets of `shared/bench`, as converted to JSON Lines (see its
//! README for the fields).

use std::path::Path;

use anyhow::Context as _;
use serde::Deserialize;
use serde::de::DeserializeOwned;

/// One heading chunk of memtomem's corpus_v2.
#[derive(Debug, Clone, Deserialize)]
pub struct Chunk {
    pub id: String,
    pub lang: String,
    pub topic: String,
    pub genre: String,
    pub heading: String,
    pub text: String,
    /// Subtopic tags the chunk is mainly about (grade 1.0).
    pub primary: Vec<String>,
    /// Subtopic tags it touches (grade 0.5 in nDCG).
    #[serde(default)]
    pub secondary: Vec<String>,
}

impl Chunk {
    /// What is stored as the memory: heading and body, as one passage.
    pub fn content(&self) -> String {
        format!("{}\n{}", self.heading.trim(), self.text.trim())
    }
}

/// One query of memtomem's 100-query portfolio.
#[derive(Debug, Clone, Deserialize)]
pub struct Query {
    pub id: String,
    pub text: String,
    pub targets: Vec<String>,
    #[serde(rename = "type")]
    pub kind: String,
    pub lang: String,
    #[serde(default)]
    pub genre: Option<String>,
}

/// The memtomem corpus and its queries.
#[derive(Debug, Clone)]
pub struct Corpus {
    pub chunks: Vec<Chunk>,
    pub queries: Vec<Query>,
}

impl Corpus {
    /// Loads `chunks.jsonl` and `queries.jsonl` from `dir`.
    pub fn load(dir: &Path) -> anyhow::Result<Self> {
        Ok(Self {
            chunks: read_jsonl(&dir.join("chunks.jsonl"))?,
            queries: read_jsonl(&dir.join("queries.jsonl"))?,
        })
    }
}

/// One LoCoMo dialogue turn.
#[derive(Debug, Clone, Deserialize)]
pub struct Turn {
    pub conversation: String,
    pub session: u32,
    pub session_time: String,
    pub dia_id: String,
    pub speaker: String,
    pub text: String,
}

impl Turn {
    pub fn content(&self) -> String {
        format!("{}: {}", self.speaker.trim(), self.text.trim())
    }
}

/// One LoCoMo question.
#[derive(Debug, Clone, Deserialize)]
pub struct Question {
    pub conversation: String,
    pub id: String,
    pub question: String,
    /// A string or, for a few questions, a number; only reported.
    pub answer: serde_json::Value,
    /// Dialogue ids (`D3:5`) of the turns that hold the answer.
    pub evidence: Vec<String>,
    /// 1–4 answerable, 5 adversarial.
    pub category: u8,
}

/// LoCoMo turns and questions.
#[derive(Debug, Clone)]
pub struct Locomo {
    pub turns: Vec<Turn>,
    pub questions: Vec<Question>,
}

impl Locomo {
    /// Loads `turns.jsonl` and `questions.jsonl` from `dir`.
    pub fn load(dir: &Path) -> anyhow::Result<Self> {
        Ok(Self {
            turns: read_jsonl(&dir.join("turns.jsonl"))?,
            questions: read_jsonl(&dir.join("questions.jsonl"))?,
        })
    }

    /// Conversation ids in the order they first appear in the turns.
    pub fn conversations(&self) -> Vec<String> {
        let mut ids: Vec<String> = Vec::new();
        for turn in &self.turns {
            if !ids.contains(&turn.conversation) {
                ids.push(turn.conversation.clone());
            }
        }
        ids
    }
}

/// Parses one JSON value per non-empty line; errors name the file and line.
pub fn read_jsonl<T: DeserializeOwned>(path: &Path) -> anyhow::Result<Vec<T>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(index, line)| {
            serde_json::from_str(line)
                .with_context(|| format!("{}:{}: invalid record", path.display(), index + 1))
        })
        .collect()
}
