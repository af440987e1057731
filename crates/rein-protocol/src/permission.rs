//! Permission rules as they are written: in a policy file, or on a plan step.
//! The rules are evaluated by `rein-sandbox`'s policy.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What a rule says about what it matches. Ordered from least to most strict:
/// the strictest matching rule decides.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Allow,
    Ask,
    Deny,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Allow => "allow",
            Verdict::Ask => "ask",
            Verdict::Deny => "deny",
        }
    }
}

/// Why a person is asked, when a rule says `ask`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AskTrigger {
    SuspiciousCommand,
    DestructiveAction,
    ExternalNetworkCall,
}

/// Reading or writing a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Access {
    Read,
    Write,
}

/// One rule: a verdict on commands, paths, network use or MCP tools.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PermissionRule {
    /// allow, ask or deny what the rule matches (the strictest matching rule decides).
    #[serialize_always]
    pub verdict: Option<Verdict>,
    /// `PROGRAM ARG…` as globs, matched word by word; `**` matches any number of
    /// arguments.
    pub command: Option<String>,
    /// A path glob (`*` stays within a directory, `**` crosses them).
    pub path: Option<String>,
    /// With `path`: which access the rule is about (both if not given).
    pub access: Option<Access>,
    /// A host glob; `*` for any network use.
    pub network: Option<String>,
    /// An MCP tool as `SERVER/TOOL`, a glob: `fs/write_file`, `fs/*`, `*/*`.
    pub mcp: Option<String>,
    /// Why the rule is there, shown with its verdict.
    pub reason: Option<String>,
    /// With `ask`: why a person is asked (default by what the rule is about).
    pub trigger: Option<AskTrigger>,
}

/// What a policy said about a step's command, recorded with the run.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PermissionDecision {
    pub verdict: Verdict,
    /// What was checked: a simple command, a path, a host.
    pub subject: String,
    /// The rule that decided ("rule 3 of policy.toml: deny command `rm -rf /*`"),
    /// or where the default came from.
    pub rule: String,
    pub reason: Option<String>,
    /// With `ask`: why a person is asked.
    pub trigger: Option<AskTrigger>,
}
