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

/// A new ULID, greater than every other this process made: within one
/// millisecond a plain ULID's random part is in no order, so ids made in the
/// same millisecond (tasks created back to back) would list out of order.
/// Across processes and machines the order is the clocks'.
pub fn fresh_ulid() -> ulid::Ulid {
    static MADE: std::sync::Mutex<ulid::Generator> = std::sync::Mutex::new(ulid::Generator::new());
    match MADE.lock() {
        // Fails only when 2^80 ids were made within one millisecond.
        Ok(mut made) => made.generate().unwrap_or_else(|_| ulid::Ulid::new()),
        Err(_) => ulid::Ulid::new(),
    }
}

/// Whether `rest` is a ULID as rein writes it: 26 characters of Crockford's
/// base32 in upper case, the first at most `7` (a larger one overflows 128 bits).
pub fn is_canonical_ulid(rest: &str) -> bool {
    rest.len() == 26
        && rest.bytes().enumerate().all(|(i, b)| {
            if i == 0 {
                (b'0'..=b'7').contains(&b)
            } else {
                b.is_ascii_digit()
                    || (b.is_ascii_uppercase() && !matches!(b, b'I' | b'L' | b'O' | b'U'))
            }
        })
}

/// The pattern of an id with `prefix`, as [`is_canonical_ulid`] checks it.
pub fn id_pattern(prefix: &str) -> String {
    format!("^{prefix}_[0-7][0-9A-HJKMNP-TV-Z]{{25}}$")
}

macro_rules! prefixed_id {
    ($(#[doc = $doc:literal])* $name:ident, $prefix:literal) => {
        prefixed_id!(@id $(#[doc = $doc])* $name, $prefix, true);
    };
    // Ids a caller may also choose: any string on the wire, no pattern.
    ($(#[doc = $doc:literal])* $name:ident, $prefix:literal, free) => {
        prefixed_id!(@id $(#[doc = $doc])* $name, $prefix, false);
    };
    (@id $(#[doc = $doc:literal])* $name:ident, $prefix:literal, $patterned:literal) => {
        impl JsonSchema for $name {
            fn schema_name() -> std::borrow::Cow<'static, str> {
                stringify!($name).into()
            }
            fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
                let mut schema = schemars::json_schema!({
                    "description": concat!($($doc),*).trim(),
                    "type": "string",
                });
                if $patterned {
                    schema.insert("pattern".into(), id_pattern($prefix).into());
                }
                schema
            }
        }

        $(#[doc = $doc])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            pub const PREFIX: &'static str = $prefix;

            /// A fresh id: the prefix, `_`, and a new ULID, after every
            /// one this process made before (see [`fresh_ulid`]).
            pub fn new() -> Self {
                Self(format!("{}_{}", $prefix, $crate::ids::fresh_ulid()))
            }

            /// Parses an id, checking its prefix and ULID part (as rein writes
            /// it: upper case, in range).
            pub fn parse(value: &str) -> Result<Self, InvalidId> {
                let ok = value
                    .strip_prefix(concat!($prefix, "_"))
                    .is_some_and(is_canonical_ulid);
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
    "shs",
    free
);

prefixed_id!(
    /// A generated id of a harness contract (`hctr_…`).
    ContractId,
    "hctr",
    free
);
prefixed_id!(
    /// A generated id of an evidence bundle (`evb_…`).
    EvidenceId,
    "evb",
    free
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
    fn ids_made_back_to_back_sort_in_the_order_they_were_made() {
        // Thousands within a few milliseconds: many share one.
        let made: Vec<TaskId> = (0..5000).map(|_| TaskId::new()).collect();
        for pair in made.windows(2) {
            assert!(pair[0] < pair[1], "{:?} then {:?}", pair[0], pair[1]);
        }
        // Every kind of id draws from the same sequence.
        let (a, b) = (TaskId::new(), SessionId::new());
        assert!(a.as_str()["task_".len()..] < b.as_str()["ses_".len()..]);
    }

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
    fn parse_takes_only_ids_as_rein_writes_them_and_the_schema_says_so() {
        let id = TaskId::new();
        let rest = &id.as_str()["task_".len()..];
        // Lower case, a ULID over 128 bits, a letter Crockford leaves out.
        for bad in [
            format!("task_{}", rest.to_lowercase()),
            format!("task_8{}", &rest[1..]),
            format!("task_{}I", &rest[..25]),
        ] {
            assert!(TaskId::parse(&bad).is_err(), "{bad}");
        }
        let schema = serde_json::to_value(schemars::schema_for!(TaskId)).unwrap();
        let validator = jsonschema::validator_for(&schema).unwrap();
        assert!(validator.is_valid(&serde_json::json!(id.as_str())));
        for bad in [
            "task_0",
            "task_8ZZZZZZZZZZZZZZZZZZZZZZZZZ",
            "apr_01ARZ3NDEKTSV4RRFFQ69G5FAV",
        ] {
            assert!(!validator.is_valid(&serde_json::json!(bad)), "{bad}");
        }
        // A caller may name a shared state as it likes.
        let free = serde_json::to_value(schemars::schema_for!(SharedStateId)).unwrap();
        assert!(free.get("pattern").is_none(), "{free}");
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
