//! Type-prefixed ids: `<prefix>_<ULID>`.
//!
//! The ULID makes ids time-ordered (sorting by id sorts by creation time to the
//! millisecond) and unguessable (80 random bits).

use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Error for a string that is not an id of the expected kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidId {
    pub expected_prefix: &'static str,
    pub value: String,
}

impl fmt::Display for InvalidId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`{}` is not a valid id: expected `{}_` followed by a 26-character ULID",
            self.value, self.expected_prefix
        )
    }
}

impl std::error::Error for InvalidId {}

macro_rules! prefixed_id {
    ($(#[$doc:meta])* $name:ident, $prefix:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            pub const PREFIX: &'static str = $prefix;

            /// A fresh id: the prefix, `_`, and a new ULID.
            pub fn new() -> Self {
                Self(format!("{}_{}", $prefix, ulid::Ulid::new()))
            }

            /// Parses an id, checking its prefix and ULID part.
            pub fn parse(value: &str) -> Result<Self, InvalidId> {
                let ok = value
                    .strip_prefix(concat!($prefix, "_"))
                    .is_some_and(|rest| ulid::Ulid::from_string(rest).is_ok());
                if ok {
                    Ok(Self(value.to_owned()))
                } else {
                    Err(InvalidId { expected_prefix: $prefix, value: value.to_owned() })
                }
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self::new()
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl std::str::FromStr for $name {
            type Err = InvalidId;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Self::parse(s)
            }
        }
    };
}

prefixed_id!(
    /// Id of a task (`task_…`).
    TaskId,
    "task"
);
prefixed_id!(
    /// Id of a checkpoint (`cp_…`).
    CheckpointId,
    "cp"
);
prefixed_id!(
    /// Id of an event in a task's log (`evt_…`).
    EventId,
    "evt"
);
prefixed_id!(
    /// Id of a snapshot (`snap_…`).
    SnapshotId,
    "snap"
);
prefixed_id!(
    /// Id of an approval request (`apr_…`).
    ApprovalId,
    "apr"
);
prefixed_id!(
    /// Id of a governance ledger entry (`gov_…`).
    LedgerId,
    "gov"
);
prefixed_id!(
    /// A generated id of a shared harness state (`shs_…`; ids given by callers
    /// are kept as they are).
    SharedStateId,
    "shs"
);

prefixed_id!(
    /// A generated id of a harness contract (`hctr_…`).
    ContractId,
    "hctr"
);
prefixed_id!(
    /// A generated id of an evidence bundle (`evb_…`).
    EvidenceId,
    "evb"
);

prefixed_id!(
    /// Id of an agent session (`ses_…`).
    SessionId,
    "ses"
);

impl SessionId {
    /// The session of task `task` named `name`: the same id each time it is
    /// asked for, so a resumed step finds the session it started. Its time part
    /// is the task's, so sessions list in the order of their tasks.
    pub fn of(task: &TaskId, name: &str) -> SessionId {
        use sha2::{Digest, Sha256};
        let time = task
            .as_str()
            .strip_prefix("task_")
            .and_then(|u| ulid::Ulid::from_string(u).ok())
            .map_or(0, |u| u.timestamp_ms());
        let digest = Sha256::digest(format!("{}\0{name}", task.as_str()).as_bytes());
        let mut random = [0u8; 16];
        random[6..].copy_from_slice(&digest[..10]);
        SessionId(format!(
            "ses_{}",
            ulid::Ulid::from_parts(time, u128::from_be_bytes(random))
        ))
    }
}

/// A fresh W3C trace id: 32 lowercase hex digits, not all zero.
pub fn new_trace_id() -> String {
    format!("{:032x}", rand::random::<u128>() | 1)
}

/// A fresh W3C span id: 16 lowercase hex digits, not all zero.
pub fn new_span_id() -> String {
    format!("{:016x}", rand::random::<u64>() | 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_carry_their_prefix_and_parse_back() {
        let id = TaskId::new();
        assert!(id.as_str().starts_with("task_"));
        assert_eq!(id.as_str().len(), "task_".len() + 26);
        assert_eq!(TaskId::parse(id.as_str()).unwrap(), id);
    }

    #[test]
    fn parse_rejects_wrong_prefix_and_garbage() {
        let cp = CheckpointId::new();
        let err = TaskId::parse(cp.as_str()).unwrap_err();
        assert!(err.to_string().contains("task_"), "{err}");
        assert!(TaskId::parse("task_nope").is_err());
        assert!(TaskId::parse("").is_err());
    }

    #[test]
    fn ids_are_time_ordered() {
        let a = TaskId::new();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = TaskId::new();
        assert!(a < b);
    }

    #[test]
    fn trace_and_span_ids_have_w3c_widths() {
        let t = new_trace_id();
        let s = new_span_id();
        assert_eq!(t.len(), 32);
        assert_eq!(s.len(), 16);
        assert!(
            t.chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        );
    }
}
