//! What model calls cost, in tokens: each turn's usage as its provider
//! reported it, normalised to one rule.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Tokens one model call (or many, added up) used.
///
/// `input_tokens` counts every prompt token, cached ones included;
/// `cached_input_tokens` is the part of them read from the provider's cache.
/// A figure rein estimated (the server reported none) is marked `estimated`,
/// and so is any sum with one in it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Usage {
    pub input_tokens: u64,
    #[serde(default)]
    pub cached_input_tokens: u64,
    pub output_tokens: u64,
    /// Output tokens spent reasoning, where the provider reports them (they
    /// are part of `output_tokens`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub estimated: bool,
}

impl Usage {
    /// `other` added to this.
    pub fn add(&mut self, other: &Usage) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.cached_input_tokens = self
            .cached_input_tokens
            .saturating_add(other.cached_input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.reasoning_tokens = match (self.reasoning_tokens, other.reasoning_tokens) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0).saturating_add(b.unwrap_or(0))),
        };
        self.estimated |= other.estimated;
    }

    /// All tokens, in and out.
    pub fn total(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }
}

/// One model call's usage, with what served it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TurnUsage {
    pub provider: String,
    /// The model asked for.
    pub model: String,
    /// The model the server says answered, when it said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub served_model: Option<String>,
    #[serde(flatten)]
    pub usage: Usage,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_keep_reasoning_where_any_part_reported_it_and_an_estimate_marks_the_sum() {
        let mut sum = Usage::default();
        sum.add(&Usage {
            input_tokens: 100,
            cached_input_tokens: 40,
            output_tokens: 10,
            reasoning_tokens: Some(4),
            estimated: false,
        });
        sum.add(&Usage {
            input_tokens: 7,
            output_tokens: 3,
            estimated: true,
            ..Usage::default()
        });
        assert_eq!(
            sum,
            Usage {
                input_tokens: 107,
                cached_input_tokens: 40,
                output_tokens: 13,
                reasoning_tokens: Some(4),
                estimated: true,
            }
        );
        assert_eq!(sum.total(), 120);
    }
}
