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
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Usage {
    pub input_tokens: u64,
    #[serde(default)]
    pub cached_input_tokens: u64,
    pub output_tokens: u64,
    /// Output tokens spent reasoning, where the provider reports them (they
    /// are part of `output_tokens`).
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

/// What rein knows of a model (`[models."PROVIDER/MODEL"]` in `rein.toml`):
/// its prices in US dollars per million tokens, and its context window.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelInfo {
    pub input_usd_per_mtok: Option<f64>,
    /// Cached input tokens' price; unset: the input price.
    pub cached_input_usd_per_mtok: Option<f64>,
    pub output_usd_per_mtok: Option<f64>,
    /// Tokens the model takes in one request.
    pub context_window: Option<u64>,
}

impl ModelInfo {
    /// What `usage` cost, if the model is priced (an input and an output
    /// price): (input − cached) × input price + cached × cached price +
    /// output × output price, per million tokens. `None` is unpriced — never
    /// taken for free.
    pub fn cost_usd(&self, usage: &Usage) -> Option<f64> {
        let input = self.input_usd_per_mtok?;
        let output = self.output_usd_per_mtok?;
        let cached_price = self.cached_input_usd_per_mtok.unwrap_or(input);
        let cached = usage.cached_input_tokens.min(usage.input_tokens);
        #[allow(clippy::cast_precision_loss)]
        let dollars = (usage.input_tokens - cached) as f64 * input
            + cached as f64 * cached_price
            + usage.output_tokens as f64 * output;
        Some(dollars / 1_000_000.0)
    }

    /// Why it cannot be used, if it cannot: a price or window that is not a
    /// finite, non-negative number.
    pub fn check(&self) -> Result<(), String> {
        for (name, price) in [
            ("input_usd_per_mtok", self.input_usd_per_mtok),
            ("cached_input_usd_per_mtok", self.cached_input_usd_per_mtok),
            ("output_usd_per_mtok", self.output_usd_per_mtok),
        ] {
            if let Some(p) = price
                && !(p.is_finite() && p >= 0.0)
            {
                return Err(format!(
                    "`{name}` is {p}: a price is a number of dollars, 0 or more"
                ));
            }
        }
        if self.context_window == Some(0) {
            return Err("`context_window` is 0: it is the tokens one request may hold".into());
        }
        Ok(())
    }
}

/// Whether `name` names a model as `PROVIDER/MODEL` (both parts given, no
/// blank around them); if not, what is wrong.
pub fn check_model_name(name: &str) -> Result<(), String> {
    match name.split_once('/') {
        Some((provider, model))
            if !provider.trim().is_empty()
                && !model.trim().is_empty()
                && provider.trim() == provider
                && model.trim() == model =>
        {
            Ok(())
        }
        _ => Err(format!(
            "`{name}` is not a model named as \"PROVIDER/MODEL\", e.g. \"openai/gpt-4.1-mini\""
        )),
    }
}

/// Model calls added up (all of a report, or one of its rows), with their
/// cost at the configured prices: `cost_usd` is `null` when a model among
/// them has no price (named in `unpriced`).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct UsageLine {
    /// The row's group: a task id, `PROVIDER/MODEL`, or a UTC day
    /// (`YYYY-MM-DD`); none for the whole report.
    pub key: Option<String>,
    pub calls: u64,
    pub input_tokens: u64,
    pub cached_input_tokens: u64,
    pub output_tokens: u64,
    pub reasoning_tokens: Option<u64>,
    #[serialize_always]
    pub cost_usd: Option<f64>,
    /// A figure in it is rein's estimate (the server reported none).
    pub estimated: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unpriced: Vec<String>,
}

impl UsageLine {
    pub fn of(key: Option<String>, spent: &Spend) -> UsageLine {
        UsageLine {
            key,
            calls: spent.calls,
            input_tokens: spent.usage.input_tokens,
            cached_input_tokens: spent.usage.cached_input_tokens,
            output_tokens: spent.usage.output_tokens,
            reasoning_tokens: spent.usage.reasoning_tokens,
            cost_usd: spent.cost_usd,
            estimated: spent.usage.estimated,
            unpriced: spent.unpriced.clone(),
        }
    }
}

/// What `rein usage` and `GET /admin/usage` report: the total, and with
/// `by`, a row per task, model or day (by model within a task's own
/// document).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct UsageReport {
    #[serde(flatten)]
    pub total: UsageLine,
    /// `task`, `model` or `day`.
    pub by: Option<String>,
    pub rows: Option<Vec<UsageLine>>,
}

/// How much model calls may spend: tokens (input and output, cached input
/// included), US dollars at the configured prices, or both.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    /// Tokens, input and output (cached input included).
    #[serde(default, deserialize_with = "crate::de::integral")]
    #[schemars(range(min = 1))]
    pub tokens: Option<u64>,
    /// US dollars at `rein.toml`'s prices.
    #[schemars(range(min = 0.0))]
    pub cost_usd: Option<f64>,
}

// A budget's dollars are checked finite (`Budget::check`), so equality is one.
impl Eq for Budget {}

impl Budget {
    /// Whether it bounds anything, and bounds it sensibly; if not, why.
    pub fn check(&self) -> Result<(), String> {
        if self.tokens.is_none() && self.cost_usd.is_none() {
            return Err("a budget gives `tokens`, `cost_usd` or both".into());
        }
        if self.tokens == Some(0) {
            return Err("`tokens` is at least 1".into());
        }
        if self.cost_usd.is_some_and(|c| !c.is_finite() || c <= 0.0) {
            return Err("`cost_usd` is a positive number of US dollars".into());
        }
        Ok(())
    }

    /// The same budget with every bound multiplied by `factor`.
    pub fn times(&self, factor: u32) -> Budget {
        Budget {
            tokens: self.tokens.map(|t| t.saturating_mul(u64::from(factor))),
            cost_usd: self.cost_usd.map(|c| c * f64::from(factor)),
        }
    }
}

/// `1234567` as `1,234,567`: token counts as people read them.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// What rein knows of each model, by `PROVIDER/MODEL`.
pub type Models = std::collections::BTreeMap<String, ModelInfo>;

/// Model calls added up, with their cost at known prices: `cost_usd` is
/// `None` as soon as one of the models has none (named in `unpriced`), so an
/// unpriced call is never counted as free.
#[derive(Debug, Clone, PartialEq)]
pub struct Spend {
    pub calls: u64,
    pub usage: Usage,
    pub cost_usd: Option<f64>,
    pub unpriced: Vec<String>,
}

impl Default for Spend {
    fn default() -> Spend {
        Spend {
            calls: 0,
            usage: Usage::default(),
            cost_usd: Some(0.0),
            unpriced: Vec::new(),
        }
    }
}

impl Spend {
    /// Adds `calls` calls of `model` (`PROVIDER/MODEL`) that used `usage`,
    /// costed at `models`' prices.
    pub fn add(&mut self, model: &str, usage: &Usage, calls: u64, models: &Models) {
        self.calls += calls;
        self.usage.add(usage);
        match models.get(model).and_then(|m| m.cost_usd(usage)) {
            Some(dollars) => self.cost_usd = self.cost_usd.map(|sum| sum + dollars),
            None => {
                self.cost_usd = None;
                if !self.unpriced.iter().any(|m| m == model) {
                    self.unpriced.push(model.to_owned());
                }
            }
        }
    }
}

/// One model call's usage, with what served it.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TurnUsage {
    pub provider: String,
    /// The model asked for.
    pub model: String,
    /// The model the server says answered, when it said.
    pub served_model: Option<String>,
    /// The step whose turn it was.
    pub step: Option<String>,
    /// The agent session (`ses_…`) the turn was taken in.
    pub session: Option<String>,
    #[serde(flatten)]
    pub usage: Usage,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cost_follows_the_formula_and_a_model_without_prices_is_unpriced() {
        let price = ModelInfo {
            input_usd_per_mtok: Some(2.0),
            cached_input_usd_per_mtok: Some(0.5),
            output_usd_per_mtok: Some(8.0),
            context_window: None,
        };
        let used = Usage {
            input_tokens: 1_000_000,
            cached_input_tokens: 400_000,
            output_tokens: 100_000,
            ..Usage::default()
        };
        // 600k × $2 + 400k × $0.5 + 100k × $8, per million.
        let cost = price.cost_usd(&used).unwrap();
        assert!((cost - 2.2).abs() < 1e-9, "{cost}");
        let no_cached_price = ModelInfo {
            cached_input_usd_per_mtok: None,
            ..price
        };
        let cost = no_cached_price.cost_usd(&used).unwrap();
        assert!((cost - 2.8).abs() < 1e-9, "{cost}");
        assert_eq!(ModelInfo::default().cost_usd(&used), None);
        let half = ModelInfo {
            output_usd_per_mtok: None,
            ..price
        };
        assert_eq!(half.cost_usd(&used), None);
        let bad = ModelInfo {
            input_usd_per_mtok: Some(-1.0),
            ..price
        };
        assert!(bad.check().unwrap_err().contains("input_usd_per_mtok"));
    }

    #[test]
    fn a_spend_is_unpriced_once_any_model_in_it_is() {
        let models: Models = [(
            "openai/a".to_owned(),
            ModelInfo {
                input_usd_per_mtok: Some(1.0),
                output_usd_per_mtok: Some(1.0),
                ..ModelInfo::default()
            },
        )]
        .into();
        let used = Usage {
            input_tokens: 500_000,
            output_tokens: 500_000,
            ..Usage::default()
        };
        let mut spent = Spend::default();
        spent.add("openai/a", &used, 2, &models);
        assert_eq!(spent.cost_usd, Some(1.0));
        spent.add("openai/b", &used, 1, &models);
        spent.add("openai/b", &used, 1, &models);
        spent.add("openai/a", &used, 1, &models);
        assert_eq!((spent.calls, spent.cost_usd), (5, None));
        assert_eq!(spent.unpriced, ["openai/b"]);
        assert_eq!(spent.usage.input_tokens, 2_000_000);
    }

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
