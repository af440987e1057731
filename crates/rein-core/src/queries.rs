//! The API's list queries and the store's filters, each way: a client turns
//! its filter into the query it sends ([`TaskFilter::query`]), and the server
//! turns the query it gets back into that filter ([`TaskFilter::of_query`]),
//! refusing a value it cannot read with a message that names it. One pair of
//! conversions for both, so that what a client asks is what a server reads.

use rein_protocol::api::{ApprovalQuery, ContractQuery, EvidenceQuery, StateQuery, TaskQuery};
use rein_protocol::{
    ApprovalStatus, ConfidenceLevel, ContractStatus, Risk, TaskId, TaskStatus, Timestamp,
    WorkStatus,
};

use crate::store::{ApprovalFilter, RecordFilter, RecordKind, SharedStateFilter, TaskFilter};

/// A query's time parameter `name`, RFC 3339.
pub fn time(name: &str, value: Option<&str>) -> Result<Option<Timestamp>, String> {
    value
        .map(|v| {
            chrono::DateTime::parse_from_rfc3339(v)
                .map(|t| t.to_utc())
                .map_err(|e| format!("{name}: `{v}` is not an RFC 3339 time ({e})"))
        })
        .transpose()
}

/// A query's task id.
fn task(value: Option<&str>) -> Result<Option<TaskId>, String> {
    value
        .map(|v| {
            v.parse()
                .map_err(|e: rein_protocol::ids::InvalidId| e.to_string())
        })
        .transpose()
}

/// `value` as one of `parse`'s statuses, or a message naming it `what`
/// and listing `allowed`.
fn status<T>(
    what: &str,
    value: Option<&str>,
    parse: impl Fn(&str) -> Option<T>,
    allowed: impl Iterator<Item = &'static str>,
) -> Result<Option<T>, String> {
    value
        .map(|s| {
            parse(s).ok_or_else(|| {
                let allowed: Vec<&str> = allowed.collect();
                format!("{what} `{s}` is not one of {}", allowed.join(", "))
            })
        })
        .transpose()
}

/// `value` as the wire enum `T` (by its serde name), or a message naming
/// `field` and listing `allowed`.
pub fn one_of<T: serde::de::DeserializeOwned>(
    field: &str,
    value: Option<&str>,
    allowed: &str,
) -> Result<Option<T>, String> {
    value
        .map(|v| {
            serde_json::from_value(serde_json::Value::String(v.to_owned()))
                .map_err(|_| format!("{field} `{v}` is not one of {allowed}"))
        })
        .transpose()
}

/// The seed's filters a contract listing and an evidence listing share, as
/// their queries carry them.
struct Seed {
    tag: Option<String>,
    actor_id: Option<String>,
    channel_id: Option<String>,
    source_session_id: Option<String>,
    created_from: Option<String>,
    created_to: Option<String>,
}

/// The seed's filters of a contract or evidence query (the same fields).
macro_rules! seed_of {
    ($q:expr) => {
        Seed {
            tag: $q.tag,
            actor_id: $q.actor_id,
            channel_id: $q.channel_id,
            source_session_id: $q.source_session_id,
            created_from: $q.created_from,
            created_to: $q.created_to,
        }
    };
}

impl Seed {
    /// What `f` asks of them.
    fn of(f: &RecordFilter) -> Seed {
        Seed {
            tag: f.tag.clone(),
            actor_id: f.field("actorId"),
            channel_id: f.field("channelId"),
            source_session_id: f.field("sourceSessionId"),
            created_from: f.created_from.map(|t| t.to_rfc3339()),
            created_to: f.created_to.map(|t| t.to_rfc3339()),
        }
    }

    /// `f`, asking them too.
    fn into_filter(self, mut f: RecordFilter) -> Result<RecordFilter, String> {
        f.tag = self.tag;
        f.created_from = time("createdFromUtc", self.created_from.as_deref())?;
        f.created_to = time("createdToUtc", self.created_to.as_deref())?;
        let named = [
            ("actorId", self.actor_id),
            ("channelId", self.channel_id),
            ("sourceSessionId", self.source_session_id),
        ];
        f.fields
            .extend(named.into_iter().filter_map(|(n, v)| Some((n, v?))));
        Ok(f)
    }
}

impl RecordFilter {
    /// The value field `name` must equal, if this filter asks one.
    fn field(&self, name: &str) -> Option<String> {
        self.fields
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.clone())
    }

    /// The query that asks for this filter's contracts.
    pub fn contract_query(&self) -> ContractQuery {
        let seed = Seed::of(self);
        ContractQuery {
            status: self.status.clone(),
            task_id: self.task_id.clone(),
            shared_state_id: self.shared_state_id.clone(),
            risk_level: self.field("riskLevel"),
            tag: seed.tag,
            actor_id: seed.actor_id,
            channel_id: seed.channel_id,
            source_session_id: seed.source_session_id,
            created_from: seed.created_from,
            created_to: seed.created_to,
            limit: self.limit,
            cursor: self.cursor.clone(),
        }
    }

    /// The contracts filter `q` asks for.
    pub fn of_contract_query(q: ContractQuery) -> Result<RecordFilter, String> {
        // Checked, and kept as the text the store filters on.
        let allowed = ContractStatus::ALL.iter().map(|c| c.as_str());
        status(
            "contract status",
            q.status.as_deref(),
            ContractStatus::parse,
            allowed,
        )?;
        let risk: Option<Risk> = one_of(
            "riskLevel",
            q.risk_level.as_deref(),
            "unknown, low, medium, high, critical",
        )?;
        let mut f = RecordFilter::new(RecordKind::Contract);
        f.status = q.status;
        f.task_id = q.task_id;
        f.shared_state_id = q.shared_state_id;
        f.limit = q.limit;
        f.cursor = q.cursor;
        if let Some(risk) = risk {
            f.fields.push(("riskLevel", risk.as_str().to_owned()));
        }
        seed_of!(q).into_filter(f)
    }

    /// The query that asks for this filter's evidence bundles.
    pub fn evidence_query(&self) -> EvidenceQuery {
        let seed = Seed::of(self);
        EvidenceQuery {
            contract_id: self.contract_id.clone(),
            task_id: self.task_id.clone(),
            shared_state_id: self.shared_state_id.clone(),
            learning_proposal_id: self.field("learningProposalId"),
            confidence: self.field("confidence"),
            tag: seed.tag,
            actor_id: seed.actor_id,
            channel_id: seed.channel_id,
            source_session_id: seed.source_session_id,
            created_from: seed.created_from,
            created_to: seed.created_to,
            limit: self.limit,
            cursor: self.cursor.clone(),
        }
    }

    /// The evidence filter `q` asks for.
    pub fn of_evidence_query(q: EvidenceQuery) -> Result<RecordFilter, String> {
        let level: Option<ConfidenceLevel> = one_of(
            "confidence",
            q.confidence.as_deref(),
            "unknown, low, medium, high",
        )?;
        let mut f = RecordFilter::new(RecordKind::Evidence);
        f.task_id = q.task_id;
        f.shared_state_id = q.shared_state_id;
        f.contract_id = q.contract_id;
        f.limit = q.limit;
        f.cursor = q.cursor;
        if let Some(level) = level {
            f.fields.push(("confidence", level.as_str().to_owned()));
        }
        if let Some(l) = q.learning_proposal_id {
            f.fields.push(("learningProposalId", l));
        }
        seed_of!(q).into_filter(f)
    }
}

impl TaskFilter {
    /// The query that asks for this filter's tasks.
    pub fn query(&self) -> TaskQuery {
        TaskQuery {
            session_id: self.session_id.clone(),
            status: self.status.map(|s| s.as_str().to_owned()),
            created_from: self.created_from.map(|t| t.to_rfc3339()),
            created_to: self.created_to.map(|t| t.to_rfc3339()),
            limit: self.limit,
            cursor: self.cursor.clone(),
            forked_from: self.forked_from.as_ref().map(ToString::to_string),
        }
    }

    /// The filter `q` asks for.
    pub fn of_query(q: TaskQuery) -> Result<TaskFilter, String> {
        let allowed = TaskStatus::ALL.iter().map(|s| s.as_str());
        Ok(TaskFilter {
            status: status("status", q.status.as_deref(), TaskStatus::parse, allowed)?,
            created_from: time("created_from", q.created_from.as_deref())?,
            created_to: time("created_to", q.created_to.as_deref())?,
            forked_from: task(q.forked_from.as_deref())?,
            session_id: q.session_id,
            limit: q.limit,
            cursor: q.cursor,
        })
    }
}

impl ApprovalFilter {
    /// The query that asks for this filter's requests (every status: `all`).
    pub fn query(&self) -> ApprovalQuery {
        ApprovalQuery {
            status: Some(self.status.map_or("all", |s| s.as_str()).to_owned()),
            task_id: self.task_id.as_ref().map(ToString::to_string),
            limit: self.limit,
        }
    }

    /// The filter `q` asks for.
    pub fn of_query(q: ApprovalQuery) -> Result<ApprovalFilter, String> {
        let status = match q.status.as_deref() {
            None | Some("all") => None,
            Some(s) => Some(
                ApprovalStatus::parse(s)
                    .ok_or_else(|| format!("status `{s}` is not an approval status"))?,
            ),
        };
        Ok(ApprovalFilter {
            status,
            task_id: task(q.task_id.as_deref())?,
            limit: q.limit,
        })
    }
}

impl SharedStateFilter {
    /// The query that asks for this filter's shared states.
    pub fn query(&self) -> StateQuery {
        StateQuery {
            session_id: self.session_id.clone(),
            parent_session_id: self.parent_session_id.clone(),
            harness_contract_id: self.harness_contract_id.clone(),
            status: self.status.map(|s| s.as_str().to_owned()),
            tag: self.tag.clone(),
            created_from: self.created_from.map(|t| t.to_rfc3339()),
            created_to: self.created_to.map(|t| t.to_rfc3339()),
            limit: self.limit,
            cursor: self.cursor.clone(),
        }
    }

    /// The filter `q` asks for (its times named as the seeds name them).
    pub fn of_query(q: StateQuery) -> Result<SharedStateFilter, String> {
        let allowed = WorkStatus::ALL.iter().map(|w| w.as_str());
        Ok(SharedStateFilter {
            status: status("status", q.status.as_deref(), WorkStatus::parse, allowed)?,
            created_from: time("createdFrom", q.created_from.as_deref())?,
            created_to: time("createdTo", q.created_to.as_deref())?,
            session_id: q.session_id,
            parent_session_id: q.parent_session_id,
            harness_contract_id: q.harness_contract_id,
            tag: q.tag,
            limit: q.limit,
            cursor: q.cursor,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_filter_sent_as_its_query_is_read_back_as_itself() {
        let at = chrono::DateTime::parse_from_rfc3339("2026-12-06T10:00:00Z")
            .unwrap()
            .to_utc();
        let tasks = TaskFilter {
            session_id: Some("ses_1".into()),
            status: Some(TaskStatus::Paused),
            created_from: Some(at),
            created_to: Some(at + chrono::Duration::hours(1)),
            limit: Some(7),
            cursor: Some("task_01".into()),
            forked_from: Some(TaskId::new()),
        };
        let back = TaskFilter::of_query(tasks.query()).unwrap();
        assert_eq!(format!("{back:?}"), format!("{tasks:?}"));
        let approvals = ApprovalFilter {
            status: Some(ApprovalStatus::Denied),
            task_id: Some(TaskId::new()),
            limit: Some(3),
        };
        let back = ApprovalFilter::of_query(approvals.query()).unwrap();
        assert_eq!(format!("{back:?}"), format!("{approvals:?}"));
        let all = ApprovalFilter::of_query(ApprovalFilter::default().query()).unwrap();
        assert_eq!(all.status, None, "`all` is every status");
        let states = SharedStateFilter {
            session_id: Some("ses_1".into()),
            parent_session_id: Some("ses_0".into()),
            harness_contract_id: Some("hc_1".into()),
            status: Some(WorkStatus::Completed),
            tag: Some("docs".into()),
            created_from: Some(at),
            created_to: None,
            limit: Some(9),
            cursor: Some("a|b".into()),
        };
        let back = SharedStateFilter::of_query(states.query()).unwrap();
        assert_eq!(format!("{back:?}"), format!("{states:?}"));
    }

    #[test]
    fn a_record_filter_sent_as_its_query_is_read_back_as_itself() {
        let at = chrono::DateTime::parse_from_rfc3339("2026-12-06T10:00:00Z")
            .unwrap()
            .to_utc();
        let mut contracts = RecordFilter::new(RecordKind::Contract);
        contracts.status = Some("approved".into());
        contracts.task_id = Some("task_1".into());
        contracts.shared_state_id = Some("hs_1".into());
        contracts.tag = Some("docs".into());
        contracts.created_from = Some(at);
        contracts.limit = Some(5);
        contracts.cursor = Some("t|c".into());
        contracts.fields = vec![
            ("riskLevel", "high".into()),
            ("actorId", "ana".into()),
            ("channelId", "cli".into()),
            ("sourceSessionId", "ses_9".into()),
        ];
        let back = RecordFilter::of_contract_query(contracts.contract_query()).unwrap();
        assert_eq!(format!("{back:?}"), format!("{contracts:?}"));
        let mut evidence = RecordFilter::new(RecordKind::Evidence);
        evidence.contract_id = Some("hc_1".into());
        evidence.created_to = Some(at);
        evidence.fields = vec![
            ("confidence", "medium".into()),
            ("learningProposalId", "lp_1".into()),
            ("actorId", "ana".into()),
        ];
        let back = RecordFilter::of_evidence_query(evidence.evidence_query()).unwrap();
        assert_eq!(format!("{back:?}"), format!("{evidence:?}"));
        let risk = RecordFilter::of_contract_query(ContractQuery {
            risk_level: Some("extreme".into()),
            ..ContractQuery::default()
        })
        .unwrap_err();
        assert_eq!(
            risk,
            "riskLevel `extreme` is not one of unknown, low, medium, high, critical"
        );
        let status = RecordFilter::of_contract_query(ContractQuery {
            status: Some("done".into()),
            ..ContractQuery::default()
        })
        .unwrap_err();
        assert!(
            status.starts_with("contract status `done` is not one of draft, "),
            "{status}"
        );
        let time = RecordFilter::of_evidence_query(EvidenceQuery {
            created_from: Some("noon".into()),
            ..EvidenceQuery::default()
        })
        .unwrap_err();
        assert!(time.starts_with("createdFromUtc: `noon`"), "{time}");
    }

    #[test]
    fn a_query_value_that_cannot_be_read_is_refused_naming_it() {
        let bad_status = TaskFilter::of_query(TaskQuery {
            status: Some("done".into()),
            ..TaskQuery::default()
        })
        .unwrap_err();
        assert!(
            bad_status.starts_with("status `done` is not one of pending, "),
            "{bad_status}"
        );
        let bad_time = TaskFilter::of_query(TaskQuery {
            created_to: Some("yesterday".into()),
            ..TaskQuery::default()
        })
        .unwrap_err();
        assert!(
            bad_time.starts_with("created_to: `yesterday` is not an RFC 3339 time"),
            "{bad_time}"
        );
        let bad_task = ApprovalFilter::of_query(ApprovalQuery {
            task_id: Some("nope".into()),
            ..ApprovalQuery::default()
        })
        .unwrap_err();
        assert!(bad_task.contains("nope"), "{bad_task}");
        let bad_approval = ApprovalFilter::of_query(ApprovalQuery {
            status: Some("maybe".into()),
            ..ApprovalQuery::default()
        })
        .unwrap_err();
        assert_eq!(bad_approval, "status `maybe` is not an approval status");
        let bad_state_time = SharedStateFilter::of_query(StateQuery {
            created_from: Some("soon".into()),
            ..StateQuery::default()
        })
        .unwrap_err();
        assert!(
            bad_state_time.starts_with("createdFrom: `soon`"),
            "{bad_state_time}"
        );
    }
}
