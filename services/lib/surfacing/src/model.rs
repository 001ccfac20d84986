//! Model-aware defaults: a consumer model with a small context window gets a
//! small injection, few results and strong compression of tool results; a
//! model with a very large window gets more of everything.
//!
//! Note the deliberate difference from the reference's 0.1.35 rule, which
//! only ever lowered values: here a large window (> 200K tokens) raises the
//! floors of results and injection size, as the seed asks.

/// A coarse context-window class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tier {
    /// At most 32,000 tokens.
    Small,
    /// More than 32,000 and at most 200,000 tokens.
    Medium,
    /// More than 200,000 tokens.
    Large,
}

/// The tier of a context window given in tokens.
pub fn tier_for_window(context_tokens: u32) -> Tier {
    match context_tokens {
        0..=32_000 => Tier::Small,
        32_001..=200_000 => Tier::Medium,
        _ => Tier::Large,
    }
}

/// Known context windows by model-name prefix (lowercase); the longest
/// matching prefix wins, so `o1-mini` beats `o1` and `gemma-3` beats `gemma`.
const CONTEXT_WINDOWS: &[(&str, u32)] = &[
    ("claude-", 200_000),
    ("claude-3", 200_000),
    ("claude-opus-4", 200_000),
    ("claude-sonnet-4", 200_000),
    ("claude-sonnet-4-5", 200_000),
    ("claude-haiku-4", 200_000),
    ("gpt-4.1", 1_047_576),
    ("gpt-4o", 128_000),
    ("gpt-5", 400_000),
    ("o1", 200_000),
    ("o1-mini", 128_000),
    ("o3", 200_000),
    ("o4-mini", 200_000),
    ("gemini-1.5-pro", 1_048_576),
    ("gemini-1.5-flash", 1_048_576),
    ("gemini-2", 1_048_576),
    ("llama-3", 128_000),
    ("llama-4", 512_000),
    ("llama-4-scout", 512_000),
    ("llama-4-maverick", 1_048_576),
    ("qwen", 131_072),
    ("deepseek", 131_072),
    ("mistral-", 32_000),
    ("mistral-small", 32_000),
    ("mistral-large", 131_072),
    ("codestral", 262_144),
    ("command-a", 262_144),
    ("gemma", 8_192),
    ("gemma-2", 8_192),
    ("gemma-3", 128_000),
    ("phi-3-mini", 4_096),
];

/// The context window of a model name by prefix (longest prefix wins),
/// case-insensitive. A provider prefix such as `anthropic/` or `openai/` is
/// ignored. `None` for unknown models.
pub fn context_window_for_model(model: &str) -> Option<u32> {
    let name = model.trim().to_lowercase();
    let name = name.rsplit('/').next().unwrap_or_default();
    CONTEXT_WINDOWS
        .iter()
        .filter(|(prefix, _)| name.starts_with(prefix))
        .max_by_key(|(prefix, _)| prefix.len())
        .map(|(_, tokens)| *tokens)
}

/// How much surfacing (and the proxy's compression) may spend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Memories per block.
    pub max_results: usize,
    /// Characters of the whole block.
    pub max_injection_chars: usize,
    /// The proxy's compression target for the whole tool result.
    pub max_result_chars: usize,
}

/// Roughly 3.5 characters per token; a tool result may use 5% of the window.
const RESULT_SHARE_CHARS_PER_TOKEN: f64 = 0.05 * 3.5;

/// Adjusts the configured budget to the tier:
/// - Small: results `min(cfg, 2)`, injection `min(cfg, 1500)`, result chars
///   `ctx × 0.05 × 3.5` capped at the configured value (32K → 5,600);
/// - Medium, or no tier known: the configured budget;
/// - Large: results `max(cfg, 5)`, injection `max(cfg, 5000)`, result chars
///   `max(cfg, 32_000)`.
///
/// `context_tokens` refines the Small formula; without it the tier's upper
/// bound (32,000 tokens) is assumed.
pub fn budget(tier: Option<Tier>, configured: Budget, context_tokens: Option<u32>) -> Budget {
    match tier {
        None | Some(Tier::Medium) => configured,
        Some(Tier::Small) => {
            let tokens = context_tokens.unwrap_or(32_000).min(32_000);
            let share = (f64::from(tokens) * RESULT_SHARE_CHARS_PER_TOKEN) as usize;
            Budget {
                max_results: configured.max_results.min(2),
                max_injection_chars: configured.max_injection_chars.min(1_500),
                max_result_chars: share.min(configured.max_result_chars),
            }
        }
        Some(Tier::Large) => Budget {
            max_results: configured.max_results.max(5),
            max_injection_chars: configured.max_injection_chars.max(5_000),
            max_result_chars: configured.max_result_chars.max(32_000),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIGURED: Budget = Budget {
        max_results: 3,
        max_injection_chars: 3_000,
        max_result_chars: 16_000,
    };

    #[test]
    fn tier_boundaries() {
        assert_eq!(tier_for_window(4_096), Tier::Small);
        assert_eq!(tier_for_window(32_000), Tier::Small);
        assert_eq!(tier_for_window(32_001), Tier::Medium);
        assert_eq!(tier_for_window(200_000), Tier::Medium);
        assert_eq!(tier_for_window(200_001), Tier::Large);
    }

    #[test]
    fn model_prefixes_longest_wins() {
        let window = context_window_for_model;
        assert_eq!(window("claude-sonnet-4-20250514"), Some(200_000));
        assert_eq!(window("Claude-Opus-4-1"), Some(200_000));
        assert_eq!(window("anthropic/claude-3-5-haiku"), Some(200_000));
        assert_eq!(window("gpt-4.1-mini"), Some(1_047_576));
        assert_eq!(window("gpt-4o-mini"), Some(128_000));
        assert_eq!(window("gpt-5"), Some(400_000));
        assert_eq!(window("o1-mini"), Some(128_000));
        assert_eq!(window("o1-pro"), Some(200_000));
        assert_eq!(window("gemini-2.5-pro"), Some(1_048_576));
        assert_eq!(window("llama-4-scout-17b"), Some(512_000));
        assert_eq!(window("llama-3.1-70b"), Some(128_000));
        assert_eq!(window("qwen3-coder"), Some(131_072));
        assert_eq!(window("mistral-large-latest"), Some(131_072));
        assert_eq!(window("mistral-small-3"), Some(32_000));
        assert_eq!(window("gemma-2-9b"), Some(8_192));
        assert_eq!(window("gemma-3-27b"), Some(128_000));
        assert_eq!(window("phi-3-mini-4k"), Some(4_096));
        assert_eq!(window("my-local-model"), None);
        assert_eq!(window(""), None);
    }

    #[test]
    fn small_tier_shrinks_everything() {
        let small = budget(Some(Tier::Small), CONFIGURED, Some(32_000));
        assert_eq!(
            small,
            Budget {
                max_results: 2,
                max_injection_chars: 1_500,
                max_result_chars: 5_600
            }
        );
        let tiny = budget(Some(Tier::Small), CONFIGURED, Some(4_096));
        assert_eq!(tiny.max_result_chars, 716);
        let frugal = Budget {
            max_results: 1,
            max_injection_chars: 800,
            max_result_chars: 2_000,
        };
        assert_eq!(budget(Some(Tier::Small), frugal, None), frugal);
    }

    #[test]
    fn medium_and_unknown_keep_the_configuration() {
        assert_eq!(
            budget(Some(Tier::Medium), CONFIGURED, Some(128_000)),
            CONFIGURED
        );
        assert_eq!(budget(None, CONFIGURED, None), CONFIGURED);
    }

    #[test]
    fn large_tier_raises_floors() {
        let large = budget(Some(Tier::Large), CONFIGURED, Some(1_000_000));
        assert_eq!(
            large,
            Budget {
                max_results: 5,
                max_injection_chars: 5_000,
                max_result_chars: 32_000
            }
        );
        let generous = Budget {
            max_results: 8,
            max_injection_chars: 9_000,
            max_result_chars: 64_000,
        };
        assert_eq!(budget(Some(Tier::Large), generous, None), generous);
    }
}
