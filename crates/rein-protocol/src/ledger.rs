//! The governance ledger (spec `shared-state.md` §5): human decisions, append-only,
//! hash-chained so that an edited or removed entry is detectable.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::Timestamp;
use crate::ids::{ApprovalId, LedgerId, TaskId};

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
        }
    }
}

/// One recorded decision. `hash` covers every other field and the previous entry's
/// hash; the first entry's `prev_hash` is 64 zeros.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct LedgerEntry {
    pub id: LedgerId,
    /// Position in the ledger, from 1 without gaps.
    pub seq: u64,
    pub kind: LedgerKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<ApprovalId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<TaskId>,
    /// Who decided.
    pub who: String,
    pub at: Timestamp,
    /// What the decision covers (e.g. `task:… step:ship`).
    pub scope: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selected_option: Option<String>,
    pub prev_hash: String,
    pub hash: String,
}

/// `prev_hash` of the first entry.
pub const GENESIS_HASH: &str = "0000000000000000000000000000000000000000000000000000000000000000";

impl LedgerEntry {
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct LedgerCheck {
    /// How many entries were read.
    pub entries: u64,
    pub intact: bool,
    /// Each problem, naming its entry.
    pub problems: Vec<String>,
    /// The newest entry's position and hash: record it, and check against it
    /// later (`--head`, `?head=`), to catch a removal of the newest entries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head: Option<LedgerHead>,
    /// The head recorded earlier that the ledger was checked against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
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
