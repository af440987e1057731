//! Budgets of an agent step's model calls: the step's own (`budget` on the
//! step), the task's (`budget` on the plan, all its steps together), and the
//! day's (`daily_budget` in `rein.toml`, every task's calls since 00:00 UTC).
//! Before each model turn, what was spent and what the next request will
//! take are held against each; one the turn would pass stops the step for a
//! person, as a durable question: allow ×2, ×4, the amount given as the
//! answer's reason, or stop. A grant is journaled (a resumed step keeps it)
//! and, as the approval's answer, sealed in the ledger.

pub use rein_protocol::usage::thousands;
use rein_protocol::{Budget, Models, Usage};

/// Which budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Step,
    Task,
    Daily,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Step => "step",
            Scope::Task => "task",
            Scope::Daily => "daily",
        }
    }

    pub fn parse(text: &str) -> Option<Scope> {
        Some(match text {
            "step" => Scope::Step,
            "task" => Scope::Task,
            "daily" => Scope::Daily,
            _ => return None,
        })
    }

    /// Who spent, for a person, with its verb: "step `draft` has", "the
    /// task has", "all tasks today have".
    pub fn who(self, step: &str) -> String {
        match self {
            Scope::Step => format!("step `{step}` has"),
            Scope::Task => "the task has".to_owned(),
            Scope::Daily => "all tasks today have".to_owned(),
        }
    }
}

/// What was spent: tokens in and out, and dollars at the configured prices
/// (`None`: a model without a price was among them, named in `unpriced`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Spent {
    pub tokens: u64,
    pub cost_usd: Option<f64>,
    pub unpriced: Vec<String>,
}

impl Spent {
    /// Nothing spent yet.
    pub fn nothing() -> Spent {
        Spent {
            tokens: 0,
            cost_usd: Some(0.0),
            unpriced: Vec::new(),
        }
    }

    /// `usage` of `model` (`PROVIDER/MODEL`) added.
    pub fn add(&mut self, model: &str, usage: &Usage, models: &Models) {
        self.tokens = self.tokens.saturating_add(usage.total());
        match models.get(model).and_then(|m| m.cost_usd(usage)) {
            Some(dollars) => self.cost_usd = self.cost_usd.map(|c| c + dollars),
            None => {
                self.cost_usd = None;
                if !self.unpriced.iter().any(|m| m == model) {
                    self.unpriced.push(model.to_owned());
                }
            }
        }
    }
}

/// Why the next turn would pass `budget`, having `spent`, when its request
/// takes `next` input tokens of `model` (`None`: it would not). A dollar
/// bound over calls of a model without a price cannot be checked, and so
/// stops the step too.
pub fn passed(
    budget: &Budget,
    spent: &Spent,
    next: u64,
    model: &str,
    models: &Models,
) -> Option<String> {
    if let Some(limit) = budget.tokens
        && spent.tokens.saturating_add(next) > limit
    {
        return Some(format!(
            "used {} of {} tokens{} (the next request takes about {})",
            thousands(spent.tokens),
            thousands(limit),
            spent
                .cost_usd
                .map(|c| format!(" ({})", dollars(c)))
                .unwrap_or_default(),
            thousands(next)
        ));
    }
    if let Some(limit) = budget.cost_usd {
        let next_cost = models.get(model).and_then(|m| {
            m.cost_usd(&Usage {
                input_tokens: next,
                ..Usage::default()
            })
        });
        match (spent.cost_usd, next_cost) {
            (Some(c), Some(n)) if c + n > limit => {
                return Some(format!(
                    "used {} of {} ({} tokens; the next request costs about {})",
                    dollars(c),
                    dollars(limit),
                    thousands(spent.tokens),
                    dollars(n)
                ));
            }
            (Some(_), Some(_)) => {}
            (cost, _) => {
                let mut unpriced = spent.unpriced.clone();
                if next_cost.is_none() && !unpriced.iter().any(|m| m == model) {
                    unpriced.push(model.to_owned());
                }
                return Some(format!(
                    "used {} tokens{}, and its budget of {} cannot be checked: {} has no price in rein.toml ([models.\"PROVIDER/MODEL\"])",
                    thousands(spent.tokens),
                    cost.map(|c| format!(" ({} priced)", dollars(c)))
                        .unwrap_or_default(),
                    dollars(limit),
                    unpriced.join(", ")
                ));
            }
        }
    }
    None
}

/// What a person granted: the budget raised to this.
pub fn granted(budget: &Budget, option: &str, reason: Option<&str>) -> Result<Budget, String> {
    match option {
        "allow ×2" => Ok(budget.times(2)),
        "allow ×4" => Ok(budget.times(4)),
        AMOUNT => {
            let text = reason.unwrap_or_default().trim();
            let amount = parse_amount(text).ok_or_else(|| {
                format!(
                    "the answer chose `{AMOUNT}`, and its reason `{text}` is not an amount: write e.g. 50000 (tokens) or $2.50"
                )
            })?;
            let raised = match amount {
                Amount::Tokens(t) => Budget {
                    tokens: Some(t),
                    ..*budget
                },
                Amount::Dollars(d) => Budget {
                    cost_usd: Some(d),
                    ..*budget
                },
            };
            raised.check().map(|()| raised)
        }
        other => Err(format!("`{other}` is not a choice of the budget question")),
    }
}

/// The choice that takes the amount from the answer's reason.
pub const AMOUNT: &str = "allow the amount given as the reason";

/// The choices of a budget question.
pub fn options() -> Vec<String> {
    ["allow ×2", "allow ×4", AMOUNT, "stop"]
        .map(str::to_owned)
        .to_vec()
}

enum Amount {
    Tokens(u64),
    Dollars(f64),
}

/// `50000`, `50,000 tokens`, `$2.50`, `2.5 usd`.
fn parse_amount(text: &str) -> Option<Amount> {
    let lower = text.to_ascii_lowercase().replace(['_', ','], "");
    let lower = lower.trim();
    if let Some(d) = lower
        .strip_prefix('$')
        .or_else(|| lower.strip_suffix("usd"))
        .or_else(|| lower.strip_suffix("dollars"))
    {
        return d
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|d| d.is_finite() && *d > 0.0)
            .map(Amount::Dollars);
    }
    lower
        .strip_suffix("tokens")
        .unwrap_or(lower)
        .trim()
        .parse::<u64>()
        .ok()
        .filter(|t| *t > 0)
        .map(Amount::Tokens)
}

/// Dollars as a person reads them: cents, or finer below a dollar.
pub fn dollars(d: f64) -> String {
    if d >= 1.0 {
        format!("${d:.2}")
    } else {
        format!("${d:.4}")
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_owned()
    }
}

/// A budget as a person reads it.
pub fn describe(budget: &Budget) -> String {
    match (budget.tokens, budget.cost_usd) {
        (Some(t), Some(c)) => format!("{} tokens, {}", thousands(t), dollars(c)),
        (Some(t), None) => format!("{} tokens", thousands(t)),
        (None, Some(c)) => dollars(c),
        (None, None) => "nothing".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rein_protocol::ModelInfo;

    fn priced() -> Models {
        Models::from([(
            "openai/m".to_owned(),
            ModelInfo {
                input_usd_per_mtok: Some(2.0),
                output_usd_per_mtok: Some(8.0),
                ..ModelInfo::default()
            },
        )])
    }

    #[test]
    fn a_turn_that_would_pass_a_bound_says_what_was_spent_of_what() {
        let models = priced();
        let mut spent = Spent::nothing();
        spent.add(
            "openai/m",
            &Usage {
                input_tokens: 9_000,
                output_tokens: 1_240,
                ..Usage::default()
            },
            &models,
        );
        let tokens = Budget {
            tokens: Some(10_000),
            cost_usd: None,
        };
        let why = passed(&tokens, &spent, 500, "openai/m", &models).unwrap();
        assert!(
            why.starts_with("used 10,240 of 10,000 tokens ($0.0279)"),
            "{why}"
        );
        let roomy = Budget {
            tokens: Some(20_000),
            cost_usd: Some(1.0),
        };
        assert_eq!(passed(&roomy, &spent, 500, "openai/m", &models), None);
        // $0.0279 spent; the next 5,000 input tokens cost $0.01.
        let cents = Budget {
            tokens: None,
            cost_usd: Some(0.03),
        };
        let why = passed(&cents, &spent, 5_000, "openai/m", &models).unwrap();
        assert!(why.contains("of $0.03"), "{why}");
        // Dollars cannot be checked against an unpriced model: it stops too.
        let why = passed(&cents, &Spent::nothing(), 10, "openai/free", &models).unwrap();
        assert!(why.contains("openai/free has no price"), "{why}");
    }

    #[test]
    fn a_grant_doubles_quadruples_or_takes_the_amount_given() {
        let b = Budget {
            tokens: Some(10_000),
            cost_usd: Some(0.5),
        };
        assert_eq!(granted(&b, "allow ×2", None).unwrap().tokens, Some(20_000));
        assert_eq!(granted(&b, "allow ×4", None).unwrap().cost_usd, Some(2.0));
        let raised = granted(&b, AMOUNT, Some("50,000 tokens")).unwrap();
        assert_eq!((raised.tokens, raised.cost_usd), (Some(50_000), Some(0.5)));
        let raised = granted(&b, AMOUNT, Some("$2.50")).unwrap();
        assert_eq!(raised.cost_usd, Some(2.5));
        assert!(
            granted(&b, AMOUNT, Some("lots"))
                .unwrap_err()
                .contains("not an amount")
        );
        assert!(granted(&b, "maybe", None).is_err());
    }
}
