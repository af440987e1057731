//! The governance ledger (spec `shared-state.md` §5): human decisions, append-only,
//! hash-chained so that an edited or removed entry is detectable.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use std::collections::BTreeMap;

use crate::ids::{ApprovalId, LedgerId, TaskId};
use crate::{Risk, Timestamp};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum LedgerKind {
    Approved,
    Rejected,
    Skipped,
    Delegated,
    Escalated,
    Expired,
    Revoked,
    /// The seed's `unknown` decision (an entry added by hand that does not say).
    Unknown,
}

impl LedgerKind {
    pub fn as_str(self) -> &'static str {
        match self {
            LedgerKind::Approved => "approved",
            LedgerKind::Rejected => "rejected",
            LedgerKind::Skipped => "skipped",
            LedgerKind::Delegated => "delegated",
            LedgerKind::Escalated => "escalated",
            LedgerKind::Expired => "expired",
            LedgerKind::Revoked => "revoked",
            LedgerKind::Unknown => "unknown",
        }
    }
}

/// One recorded decision. `hash` covers every other field and the previous entry's
/// hash; the first entry's `prev_hash` is 64 zeros.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct LedgerEntry {
    pub id: LedgerId,
    /// Position in the ledger, from 1 without gaps.
    pub seq: u64,
    pub kind: LedgerKind,
    pub request_id: Option<ApprovalId>,
    pub task_id: Option<TaskId>,
    /// Who decided.
    pub who: String,
    pub at: Timestamp,
    /// What the decision covers (e.g. `task:… step:ship`).
    pub scope: String,
    pub reason: Option<String>,
    pub selected_option: Option<String>,
    /// A revocation's target: the entry it takes back (spec: entries are
    /// never changed; a revocation is an entry of its own).
    pub revokes: Option<LedgerId>,
    /// What an entry added by hand says in the seed's terms (source, tool,
    /// risk, scope, links, policy hint, tags, metadata).
    pub details: Option<Box<GovernanceDetails>>,
    pub prev_hash: String,
    pub hash: String,
}

/// The seed's governance scopes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum GovernanceScope {
    Once,
    Session,
    Actor,
    Channel,
    Project,
    Tool,
    Global,
    #[default]
    Unknown,
}

impl GovernanceScope {
    pub fn as_str(self) -> &'static str {
        match self {
            GovernanceScope::Once => "once",
            GovernanceScope::Session => "session",
            GovernanceScope::Actor => "actor",
            GovernanceScope::Channel => "channel",
            GovernanceScope::Project => "project",
            GovernanceScope::Tool => "tool",
            GovernanceScope::Global => "global",
            GovernanceScope::Unknown => "unknown",
        }
    }
}

/// The seed's policy hint on a decision.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, remote = "Self")]
pub struct PolicyHint {
    pub suggested_future_behavior: Option<String>,
    pub suggested_scope: Option<String>,
    pub confidence: Option<String>,
    #[serde(default = "yes")]
    pub requires_review: bool,
    pub notes: Option<String>,
}

fn yes() -> bool {
    true
}

/// The seed's ledger metadata.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, remote = "Self")]
pub struct LedgerMetadata {
    pub created_by: Option<String>,
    pub correlation_id: Option<String>,
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
}

/// The seed's fields of a governance-ledger entry that rein's own entry does
/// not have, kept with an entry added by hand (and covered by its hash).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, remote = "Self")]
pub struct GovernanceDetails {
    /// `manual` when not given.
    #[serde(default = "manual")]
    pub source: String,
    pub action_type: Option<String>,
    pub tool_name: Option<String>,
    #[serde(default)]
    pub action_summary: String,
    pub argument_summary: Option<String>,
    pub redacted_arguments: Option<String>,
    #[serde(default)]
    pub risk_level: Risk,
    #[serde(default)]
    pub scope: GovernanceScope,
    pub scope_key: Option<String>,
    pub session_id: Option<String>,
    pub harness_contract_id: Option<String>,
    pub evidence_bundle_id: Option<String>,
    pub learning_proposal_id: Option<String>,
    pub approval_id: Option<String>,
    pub actor_id: Option<String>,
    pub channel_id: Option<String>,
    pub sender_id: Option<String>,
    #[serde(rename = "expiresAtUtc")]
    pub expires_at: Option<Timestamp>,
    pub policy_hint: Option<PolicyHint>,
    #[serde(default)]
    pub tags: Vec<String>,
    pub metadata: Option<LedgerMetadata>,
}

fn manual() -> String {
    "manual".to_owned()
}

crate::objects_only!(PolicyHint, LedgerMetadata, GovernanceDetails, GovernanceAdd);

/// `POST /admin/governance/ledger`: a decision recorded by hand, in the seed's
/// shape. The fields rein sets when it appends the entry (`id`,
/// `createdAtUtc`, `updatedAtUtc`, a `status` other than `active`, the
/// `revoked…` fields) are refused naming them: an entry is sealed as rein
/// appends it, and a revocation is its own request.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
// Unknown fields are refused by `details` (flattened, it gets every field
// this struct does not name); serde's own check does not work with `flatten`.
#[serde(rename_all = "camelCase", remote = "Self")]
#[schemars(deny_unknown_fields)]
pub struct GovernanceAdd {
    /// approved, rejected, escalated, expired, revoked or unknown (the default).
    #[serde(default = "unknown_decision")]
    pub decision: LedgerKind,
    /// Who decided; the caller when not given.
    pub decided_by: Option<String>,
    pub decision_reason: Option<String>,
    /// Set by rein: only `""` is taken.
    #[schemars(with = "Option<String>", regex(pattern = "^$"))]
    pub id: Option<serde_json::Value>,
    /// Set by rein: only `active` is taken.
    #[schemars(with = "Option<String>", regex(pattern = "^active$"))]
    pub status: Option<serde_json::Value>,
    /// Set by rein: refused.
    #[schemars(with = "Option<()>")]
    pub created_at_utc: Option<serde_json::Value>,
    /// Set by rein: refused.
    #[schemars(with = "Option<()>")]
    pub updated_at_utc: Option<serde_json::Value>,
    /// Set by a revocation: refused.
    #[schemars(with = "Option<()>")]
    pub revoked_at_utc: Option<serde_json::Value>,
    /// Set by a revocation: refused.
    #[schemars(with = "Option<()>")]
    pub revoked_by: Option<serde_json::Value>,
    /// Set by a revocation: refused.
    #[schemars(with = "Option<()>")]
    pub revocation_reason: Option<serde_json::Value>,
    #[serde(flatten)]
    pub details: GovernanceDetails,
}

fn unknown_decision() -> LedgerKind {
    LedgerKind::Unknown
}

impl GovernanceAdd {
    /// The first field rein sets that the request gives, named, with why.
    pub fn set_by_rein(&self) -> Option<String> {
        let given = |v: &Option<serde_json::Value>| v.as_ref().is_some_and(|v| !v.is_null());
        if self.id.as_ref().is_some_and(|v| v != "") {
            return Some("`id` is given by rein when it appends the entry; leave it out".into());
        }
        if self.status.as_ref().is_some_and(|v| v != "active") {
            return Some(
                "`status` of a new entry is `active`; to revoke an entry, POST /admin/governance/ledger/{id}/revoke".into(),
            );
        }
        for (name, v) in [
            ("createdAtUtc", &self.created_at_utc),
            ("updatedAtUtc", &self.updated_at_utc),
            ("revokedAtUtc", &self.revoked_at_utc),
            ("revokedBy", &self.revoked_by),
            ("revocationReason", &self.revocation_reason),
        ] {
            if given(v) {
                return Some(format!(
                    "`{name}` is set by rein (an entry is sealed when it is appended, and a revocation is its own request); leave it out"
                ));
            }
        }
        None
    }
}

/// `POST /admin/governance/ledger/{id}/revoke`.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RevokeRequest {
    /// Who revokes; the caller when not given.
    pub revoked_by: Option<String>,
    pub reason: Option<String>,
}

/// An entry as the seed's governance ledger shows it: the seed's fields (with
/// `status` active, expired or revoked as of now), and rein's chain fields.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GovernanceEntry {
    pub id: String,
    pub seq: u64,
    #[serde(rename = "createdAtUtc")]
    pub created_at: Timestamp,
    #[serde(rename = "updatedAtUtc")]
    pub updated_at: Timestamp,
    pub decision: LedgerKind,
    /// active, expired (past `expiresAtUtc`) or revoked.
    pub status: String,
    pub decided_by: String,
    pub decision_reason: Option<String>,
    pub task_id: Option<String>,
    pub request_id: Option<String>,
    pub selected_option: Option<String>,
    /// The entry this one revokes, if it is a revocation.
    pub revokes: Option<String>,
    #[serde(rename = "revokedAtUtc")]
    pub revoked_at: Option<Timestamp>,
    pub revoked_by: Option<String>,
    pub revocation_reason: Option<String>,
    /// The entry's own fields in the seed's terms; for an entry rein made (an
    /// approval), `scope` is `once` and `scopeKey` rein's scope (`task:… step:…`).
    #[serde(flatten)]
    pub details: GovernanceDetails,
    pub prev_hash: String,
    pub hash: String,
}

impl GovernanceEntry {
    /// `entry` as the seed shows it; `revoked_by` is the revocation of it, if
    /// any; `now` decides whether it has expired.
    pub fn of(entry: &LedgerEntry, revoked_by: Option<&LedgerEntry>, now: Timestamp) -> Self {
        let details = entry
            .details
            .as_deref()
            .cloned()
            .unwrap_or_else(|| GovernanceDetails {
                source: if entry.request_id.is_some() {
                    "tool_approval".into()
                } else {
                    "manual".into()
                },
                action_summary: entry.scope.clone(),
                scope: GovernanceScope::Once,
                scope_key: Some(entry.scope.clone()),
                ..GovernanceDetails::default()
            });
        let status = if revoked_by.is_some() {
            "revoked"
        } else if details.expires_at.is_some_and(|t| t <= now) {
            "expired"
        } else {
            "active"
        };
        GovernanceEntry {
            id: entry.id.to_string(),
            seq: entry.seq,
            created_at: entry.at,
            updated_at: revoked_by.map_or(entry.at, |r| r.at),
            decision: entry.kind,
            status: status.into(),
            decided_by: entry.who.clone(),
            decision_reason: entry.reason.clone(),
            task_id: entry.task_id.as_ref().map(ToString::to_string),
            request_id: entry.request_id.as_ref().map(ToString::to_string),
            selected_option: entry.selected_option.clone(),
            revokes: entry.revokes.as_ref().map(ToString::to_string),
            revoked_at: revoked_by.map(|r| r.at),
            revoked_by: revoked_by.map(|r| r.who.clone()),
            revocation_reason: revoked_by.and_then(|r| r.reason.clone()),
            details,
            prev_hash: entry.prev_hash.clone(),
            hash: entry.hash.clone(),
        }
    }
}

/// An entry's status as of now, in the seed's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum GovernanceStatus {
    Active,
    Expired,
    Revoked,
}

/// `GET /admin/governance/ledger`: the seed's list filters.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GovernanceQuery {
    #[serde(default)]
    #[schemars(with = "Option<LedgerKind>")]
    pub decision: Option<String>,
    /// active, expired or revoked.
    #[serde(default)]
    #[schemars(with = "Option<GovernanceStatus>")]
    pub status: Option<String>,
    pub tool_name: Option<String>,
    pub action_type: Option<String>,
    #[serde(default)]
    #[schemars(with = "Option<Risk>")]
    pub risk_level: Option<String>,
    #[serde(default)]
    #[schemars(with = "Option<GovernanceScope>")]
    pub scope: Option<String>,
    pub session_id: Option<String>,
    pub actor_id: Option<String>,
    pub channel_id: Option<String>,
    pub decided_by: Option<String>,
    pub tag: Option<String>,
    /// Created at or after (RFC 3339).
    #[schemars(extend("format" = "date-time"))]
    pub created_from_utc: Option<String>,
    /// Created before (RFC 3339).
    #[schemars(extend("format" = "date-time"))]
    pub created_to_utc: Option<String>,
    /// 1–500 (default 100, as in the seed): the newest that match.
    #[serde(default, deserialize_with = "crate::de::within::<_, _, 1, 500>")]
    #[schemars(range(min = 1, max = 500))]
    pub limit: Option<usize>,
}

/// `prev_hash` of the first entry.
pub const GENESIS_HASH: &str = "0000000000000000000000000000000000000000000000000000000000000000";

impl LedgerEntry {
    /// A new entry, not yet sealed: `who` decided `kind` on `scope`, now.
    pub fn new(kind: LedgerKind, who: &str, scope: String) -> LedgerEntry {
        LedgerEntry {
            id: LedgerId::new(),
            seq: 0,
            kind,
            request_id: None,
            task_id: None,
            who: who.to_owned(),
            at: chrono::Utc::now(),
            scope,
            reason: None,
            selected_option: None,
            revokes: None,
            details: None,
            prev_hash: String::new(),
            hash: String::new(),
        }
    }

    /// The hash this entry must carry: SHA-256 over its fields (all but `hash`) as
    /// JSON, in declaration order.
    pub fn compute_hash(&self) -> String {
        let unsealed = LedgerEntry {
            hash: String::new(),
            ..self.clone()
        };
        let bytes = serde_json::to_vec(&unsealed).unwrap_or_default();
        Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// Places the entry after `prev` (`None` for the first) and sets its hash.
    pub fn sealed_after(mut self, prev: Option<&LedgerEntry>) -> LedgerEntry {
        self.seq = prev.map_or(1, |p| p.seq + 1);
        self.prev_hash = prev.map_or_else(|| GENESIS_HASH.to_owned(), |p| p.hash.clone());
        self.hash = self.compute_hash();
        self
    }
}

/// A ledger's head: its newest entry's position and hash, as printed by
/// `rein ledger verify` for an operator to record (`SEQ:HASH`). A chain can
/// prove each entry follows the one before it, but not that nothing came after
/// its last one: checked against a head recorded earlier, removing the newest
/// entries (or rewriting the chain from some entry on) is found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct LedgerHead {
    pub seq: u64,
    pub hash: String,
}

impl LedgerHead {
    /// The head of `entries` (oldest first), if any.
    pub fn of(entries: &[LedgerEntry]) -> Option<LedgerHead> {
        entries.last().map(|e| LedgerHead {
            seq: e.seq,
            hash: e.hash.clone(),
        })
    }

    /// `SEQ:HASH`, as printed.
    pub fn parse(text: &str) -> Result<LedgerHead, String> {
        let bad = || {
            format!(
                "`{text}` is not a ledger head: write SEQ:HASH as `rein ledger verify` prints it (e.g. 12:3f9a…, 64 hex digits)"
            )
        };
        let (seq, hash) = text.trim().split_once(':').ok_or_else(bad)?;
        let seq: u64 = seq.parse().map_err(|_| bad())?;
        if seq == 0 || hash.len() != 64 || !hash.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(bad());
        }
        Ok(LedgerHead {
            seq,
            hash: hash.to_ascii_lowercase(),
        })
    }
}

impl std::fmt::Display for LedgerHead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.seq, self.hash)
    }
}

/// What checking the ledger found (`rein ledger verify`, `/admin/ledger/verify`).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct LedgerCheck {
    /// How many entries were read.
    pub entries: u64,
    pub intact: bool,
    /// Each problem, naming its entry.
    pub problems: Vec<String>,
    /// The newest entry's position and hash: record it, and check against it
    /// later (`--head`, `?head=`), to catch a removal of the newest entries.
    pub head: Option<LedgerHead>,
    /// The head recorded earlier that the ledger was checked against.
    pub against: Option<LedgerHead>,
}

/// What is wrong with a chain of entries, naming the first bad entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChainBreak {
    /// The entry's content does not match its hash: it was edited.
    Tampered { seq: u64, id: String },
    /// The entry does not follow the one before it: something was removed or reordered.
    Broken {
        seq: u64,
        expected_prev: String,
        found_prev: String,
    },
    /// Sequence numbers skip: an entry is missing.
    Gap { expected: u64, found: u64 },
    /// The recorded head is not in the ledger any more: the newest entries
    /// were removed.
    HeadMissing { head: LedgerHead, last: u64 },
    /// The entry at the recorded head's position is another one: the chain
    /// was rewritten from there (or before).
    HeadChanged { head: LedgerHead, found: String },
    /// An entry's stored bytes cannot be read as an entry.
    Damaged { detail: String },
    /// The store lost committed writes, and with them the ledger's entries
    /// up to `head` (its head as recorded beside the store): the ledger ends
    /// before it, or holds another entry in its place.
    Lost {
        head: LedgerHead,
        /// When the loss was found (RFC 3339).
        detected_at: String,
        /// Whether a person has said they know.
        acknowledged: bool,
    },
}

impl std::fmt::Display for ChainBreak {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ChainBreak::Tampered { seq, id } => {
                write!(
                    f,
                    "entry {seq} ({id}) was changed after it was recorded: its hash does not match"
                )
            }
            ChainBreak::Broken { seq, .. } => write!(
                f,
                "entry {seq} does not follow the entry before it: an entry was removed or replaced"
            ),
            ChainBreak::Gap { expected, found } => {
                write!(f, "entry {expected} is missing (the next entry is {found})")
            }
            ChainBreak::HeadMissing { head, last } => write!(
                f,
                "the recorded head {head} is gone: the ledger ends at entry {last}, so its newest entries were removed"
            ),
            ChainBreak::HeadChanged { head, found } => write!(
                f,
                "entry {} is not the recorded head {head} (its hash is {found}): the ledger was rewritten from there or before",
                head.seq
            ),
            ChainBreak::Damaged { detail } => write!(f, "{detail}"),
            ChainBreak::Lost {
                head, detected_at, ..
            } => write!(
                f,
                "entries up to {head}, the ledger's head recorded beside the store, were lost with committed writes \
                 (found {detected_at}: the store's write-ahead log was deleted or an older copy restored); \
                 the ledger does not hold that entry any more"
            ),
        }
    }
}

/// [`verify_chain`], and that the chain still holds `head`, recorded earlier.
pub fn verify_against(entries: &[LedgerEntry], head: Option<&LedgerHead>) -> Vec<ChainBreak> {
    let mut problems = verify_chain(entries);
    if let Some(head) = head {
        match entries.iter().find(|e| e.seq == head.seq) {
            None => problems.push(ChainBreak::HeadMissing {
                head: head.clone(),
                last: entries.last().map_or(0, |e| e.seq),
            }),
            Some(e) if e.hash != head.hash => problems.push(ChainBreak::HeadChanged {
                head: head.clone(),
                found: e.hash.clone(),
            }),
            Some(_) => {}
        }
    }
    problems
}

/// Checks a whole ledger, oldest first; every problem found, in order.
pub fn verify_chain(entries: &[LedgerEntry]) -> Vec<ChainBreak> {
    let mut problems = Vec::new();
    let mut prev: Option<&LedgerEntry> = None;
    for entry in entries {
        let expected_seq = prev.map_or(1, |p| p.seq + 1);
        if entry.seq != expected_seq {
            problems.push(ChainBreak::Gap {
                expected: expected_seq,
                found: entry.seq,
            });
        }
        let expected_prev = prev.map_or(GENESIS_HASH, |p| p.hash.as_str());
        if entry.prev_hash != expected_prev {
            problems.push(ChainBreak::Broken {
                seq: entry.seq,
                expected_prev: expected_prev.to_owned(),
                found_prev: entry.prev_hash.clone(),
            });
        }
        if entry.compute_hash() != entry.hash {
            problems.push(ChainBreak::Tampered {
                seq: entry.seq,
                id: entry.id.to_string(),
            });
        }
        prev = Some(entry);
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(who: &str) -> LedgerEntry {
        LedgerEntry {
            id: LedgerId::new(),
            seq: 0,
            kind: LedgerKind::Approved,
            request_id: None,
            task_id: None,
            who: who.into(),
            at: chrono::Utc::now(),
            scope: "test".into(),
            reason: None,
            selected_option: None,
            revokes: None,
            details: None,
            prev_hash: String::new(),
            hash: String::new(),
        }
    }

    fn chain(n: usize) -> Vec<LedgerEntry> {
        let mut out: Vec<LedgerEntry> = Vec::new();
        for i in 0..n {
            let e = entry(&format!("p{i}")).sealed_after(out.last());
            out.push(e);
        }
        out
    }

    const SEED: &str = include_str!("../tests/data/seed-000-ledger-full.json");

    #[test]
    fn an_entry_without_seed_details_hashes_as_before() {
        // The fields added for the seed are left out when empty, so entries
        // sealed before them still verify.
        let e = entry("ana");
        let text = serde_json::to_string(&e).unwrap();
        assert!(
            !text.contains("revokes") && !text.contains("details"),
            "{text}"
        );
    }

    #[test]
    fn the_seed_entry_is_taken_with_every_field_and_shown_back() {
        let add: GovernanceAdd = serde_json::from_str(SEED).unwrap();
        assert_eq!(add.set_by_rein(), None);
        assert_eq!(add.decision, LedgerKind::Approved);
        assert_eq!(add.details.scope, GovernanceScope::Session);
        assert_eq!(add.details.risk_level, Risk::High);
        let mut e = entry("ana");
        e.details = Some(Box::new(add.details.clone()));
        e.reason = add.decision_reason.clone();
        let shown =
            serde_json::to_value(GovernanceEntry::of(&e, None, chrono::Utc::now())).unwrap();
        let given: serde_json::Value = serde_json::from_str(SEED).unwrap();
        for (k, v) in given.as_object().unwrap() {
            if k == "id" || k == "expiresAtUtc" {
                continue;
            }
            assert_eq!(&shown[k], v, "{k}");
        }
        assert_eq!(shown["status"], "active");
    }

    #[test]
    fn a_seed_entry_refuses_unknown_fields_and_what_rein_sets() {
        let mut v: serde_json::Value = serde_json::from_str(SEED).unwrap();
        v["mood"] = "calm".into();
        let e = serde_json::from_value::<GovernanceAdd>(v)
            .unwrap_err()
            .to_string();
        assert!(e.contains("mood"), "{e}");
        let mut v: serde_json::Value = serde_json::from_str(SEED).unwrap();
        v["policyHint"]["urgency"] = "high".into();
        let e = serde_json::from_value::<GovernanceAdd>(v)
            .unwrap_err()
            .to_string();
        assert!(e.contains("urgency"), "{e}");
        for (field, value) in [
            ("revokedBy", "bob"),
            ("createdAtUtc", "2026-01-01T00:00:00Z"),
            ("status", "revoked"),
            ("id", "gl_1"),
        ] {
            let mut v: serde_json::Value = serde_json::from_str(SEED).unwrap();
            v[field] = value.into();
            let add: GovernanceAdd = serde_json::from_value(v).unwrap();
            let why = add.set_by_rein().unwrap();
            assert!(why.contains(&format!("`{field}`")), "{why}");
        }
    }

    #[test]
    fn a_sealed_chain_verifies() {
        let c = chain(5);
        assert_eq!(c[0].prev_hash, GENESIS_HASH);
        assert_eq!(c[4].seq, 5);
        assert!(verify_chain(&c).is_empty());
    }

    #[test]
    fn an_edited_entry_is_found() {
        let mut c = chain(4);
        c[2].who = "mallory".into();
        assert_eq!(
            verify_chain(&c),
            vec![ChainBreak::Tampered {
                seq: 3,
                id: c[2].id.to_string()
            }]
        );
    }

    #[test]
    fn an_edit_with_a_recomputed_hash_breaks_the_next_link() {
        let mut c = chain(4);
        c[1].reason = Some("forged".into());
        c[1].hash = c[1].compute_hash();
        let found = verify_chain(&c);
        assert!(
            matches!(found[0], ChainBreak::Broken { seq: 3, .. }),
            "{found:?}"
        );
    }

    #[test]
    fn a_removed_tail_needs_the_recorded_head() {
        let c = chain(5);
        let head = LedgerHead::of(&c).unwrap();
        assert_eq!(LedgerHead::parse(&head.to_string()).unwrap(), head);
        assert!(verify_against(&c, Some(&head)).is_empty());
        // The newest two removed: the chain alone still verifies.
        let cut = &c[..3];
        assert!(verify_chain(cut).is_empty());
        assert_eq!(
            verify_against(cut, Some(&head)),
            vec![ChainBreak::HeadMissing {
                head: head.clone(),
                last: 3
            }]
        );
        // Rewritten from entry 3 on, every hash recomputed: only the head tells.
        let mut forged = c[..2].to_vec();
        for i in 2..5 {
            let e = entry(&format!("forged{i}")).sealed_after(forged.last());
            forged.push(e);
        }
        assert!(verify_chain(&forged).is_empty());
        assert!(matches!(
            verify_against(&forged, Some(&head))[..],
            [ChainBreak::HeadChanged { .. }]
        ));
        for bad in ["", "5", "x:abc", "0:00", &format!("5:{}", "g".repeat(64))] {
            assert!(LedgerHead::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_removed_entry_is_found() {
        let mut c = chain(4);
        c.remove(1);
        let found = verify_chain(&c);
        assert!(
            found.contains(&ChainBreak::Gap {
                expected: 2,
                found: 3
            }),
            "{found:?}"
        );
        assert!(
            found
                .iter()
                .any(|p| matches!(p, ChainBreak::Broken { seq: 3, .. }))
        );
    }
}
