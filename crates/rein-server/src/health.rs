//! `/healthz` (spec §6 rule 23): each component probed for real.

use rein_core::Engine;
pub use rein_protocol::api::{Alert, Component, Components, Health, HealthStatus as Status};

fn ok(detail: impl Into<String>) -> Component {
    Component {
        status: Status::Healthy,
        detail: detail.into(),
    }
}

fn bad(status: Status, detail: impl Into<String>) -> Component {
    Component {
        status,
        detail: detail.into(),
    }
}

/// Below this much free space on the store's file system, the store is
/// degraded: it still works, and soon will not.
pub const LOW_DISK_BYTES: u64 = 256 * 1024 * 1024;

/// The task store's component: unhealthy when a write through its file fails,
/// degraded when its file system has less than [`LOW_DISK_BYTES`] free.
fn store(probed: rein_core::StoreResult<rein_core::store::StoreProbe>) -> Component {
    let probe = match probed {
        Ok(probe) => probe,
        Err(e) => {
            return bad(
                Status::Unhealthy,
                format!("a write to the store failed: {e}"),
            );
        }
    };
    let mib = |b: u64| b / (1024 * 1024);
    let room = probe
        .free_bytes
        .map(|b| format!("; {} MiB free", mib(b)))
        .unwrap_or_default();
    let past = probe
        .last_write_error
        .as_deref()
        .map(|e| format!("; a write failed earlier: {e}"))
        .unwrap_or_default();
    if let Some(lost) = probe.lost_writes.first() {
        return bad(
            Status::Unhealthy,
            format!(
                "{}: {lost}; see what is left, then run `rein health --acknowledge-lost-writes` on its machine{past}",
                probe.location
            ),
        );
    }
    match probe.free_bytes {
        Some(free) if free < LOW_DISK_BYTES => bad(
            Status::Degraded,
            format!(
                "{}: a write and a read went through, but only {} MiB are free (below {} MiB): free some space before writes fail{past}",
                probe.location,
                mib(free),
                mib(LOW_DISK_BYTES)
            ),
        ),
        _ => ok(format!(
            "{}: a write and a read went through{room}{past}",
            probe.location
        )),
    }
}

/// This node and its leases, where nodes share the store.
async fn node(engine: &Engine) -> Option<rein_protocol::api::NodeHealth> {
    let leases = engine.store().leases()?;
    let me = leases.node().clone();
    let held = match leases.live().await {
        Ok(live) => live
            .into_iter()
            .filter(|l| l.runner == me)
            .map(|l| l.task_id)
            .collect(),
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the task leases");
            Vec::new()
        }
    };
    Some(rein_protocol::api::NodeHealth {
        runner: me,
        lease_ms: u64::try_from(leases.lease_duration().as_millis()).unwrap_or(u64::MAX),
        leases: held,
        running: engine.running(),
        max_tasks: engine.config().max_tasks,
    })
}

/// The permission rules' component: they answer a trial question; and the
/// file they came from is read again — unhealthy when it no longer reads or
/// parses (a restart would fail), degraded when it changed since start (the
/// change is not in force until a restart).
fn permission_manager(engine: &Engine) -> Component {
    let policy = &engine.config().policy;
    let trial = policy.check_script("true");
    let said = format!(
        "{} permission rule(s); a trial command `true` gets `{}` ({})",
        policy.len(),
        trial.verdict.as_str(),
        trial.rule
    );
    use rein_core::context::PolicyFile;
    match engine.config().policy_file() {
        PolicyFile::None => ok(said),
        PolicyFile::AsLoaded(path) => ok(format!("{said}; {} as loaded", path.display())),
        PolicyFile::Changed(path) => bad(
            Status::Degraded,
            format!(
                "{said}; the policy file {} changed since rein started and is not in force: restart rein to apply it",
                path.display()
            ),
        ),
        PolicyFile::Broken(path, why) => bad(
            Status::Unhealthy,
            format!(
                "{said}; but the policy file {} is broken now: {why}; the rules loaded at start still apply, and a restart would fail: fix the file",
                path.display()
            ),
        ),
    }
}

/// What went wrong lately, by component: an alert stays while its component
/// is unwell, and for [`RESOLVED_KEPT`] after it is well again, marked
/// resolved.
#[derive(Debug, Default)]
pub struct AlertLog(std::sync::Mutex<std::collections::BTreeMap<&'static str, Alert>>);

/// How long a resolved alert is still shown.
pub const RESOLVED_KEPT: chrono::Duration = chrono::Duration::hours(1);

impl AlertLog {
    /// The alerts after `components` were probed at `now`.
    pub fn update(&self, components: &Components, now: rein_protocol::Timestamp) -> Vec<Alert> {
        let mut log = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for (name, c) in components.named() {
            if c.status == Status::Healthy {
                if let Some(a) = log.get_mut(name)
                    && !a.resolved
                {
                    a.resolved = true;
                    a.resolved_at = Some(now);
                }
                continue;
            }
            let severity = if c.status == Status::Unhealthy {
                "critical"
            } else {
                "warning"
            };
            match log.get_mut(name) {
                // The same problem goes on: it keeps its first time.
                Some(a) if !a.resolved && a.severity == severity && a.message == c.detail => {}
                _ => {
                    log.insert(
                        name,
                        Alert {
                            severity: severity.to_owned(),
                            component: name.to_owned(),
                            message: c.detail.clone(),
                            timestamp: now,
                            resolved: false,
                            resolved_at: None,
                        },
                    );
                }
            }
        }
        log.retain(|_, a| a.resolved_at.is_none_or(|t| now - t < RESOLVED_KEPT));
        log.values().cloned().collect()
    }
}

pub async fn check(engine: &Engine) -> Health {
    check_with(engine, &AlertLog::default()).await
}

/// [`check`], with the alerts `log` keeps (a server keeps one, so an alert
/// that was resolved is still shown for a while).
pub async fn check_with(engine: &Engine, log: &AlertLog) -> Health {
    let task_store = store(engine.store().probe().await);
    // The manager is healthy if a command runs the way steps run: sandboxed.
    let sandbox_manager = match engine.probe_executor().await {
        rein_core::ExecutorHealth::Healthy(detail) => ok(detail),
        rein_core::ExecutorHealth::Degraded(detail) => bad(Status::Degraded, detail),
        rein_core::ExecutorHealth::Unhealthy(detail) => bad(Status::Unhealthy, detail),
    };
    let permission_manager = permission_manager(engine);
    let audit_logger = match engine.verify_ledger().await {
        Ok((n, breaks)) if breaks.is_empty() => ok(format!(
            "ledger intact ({})",
            rein_core::history::counted(n as u64, "entry", "entries")
        )),
        // Entries lost with committed writes a person has acknowledged: the
        // ledger is short of them for good, and says so, but works.
        Ok((n, breaks))
            if breaks.iter().all(|b| {
                matches!(
                    b,
                    rein_protocol::ledger::ChainBreak::Lost {
                        acknowledged: true,
                        ..
                    }
                )
            }) =>
        {
            bad(
                Status::Degraded,
                format!(
                    "ledger intact ({}) but short of entries lost with committed writes, acknowledged: {}",
                    rein_core::history::counted(n as u64, "entry", "entries"),
                    breaks.first().map(ToString::to_string).unwrap_or_default()
                ),
            )
        }
        Ok((_, breaks)) => bad(
            Status::Unhealthy,
            format!(
                "the ledger's hash chain is broken: {}",
                breaks.first().map(ToString::to_string).unwrap_or_default()
            ),
        ),
        Err(e) => bad(Status::Unhealthy, format!("cannot read the ledger: {e}")),
    };
    let metrics = engine.metrics().await.ok();
    let components = Components {
        task_store,
        sandbox_manager,
        permission_manager,
        audit_logger,
    };
    let all = components.named().map(|(_, c)| c);
    let status = all
        .iter()
        .map(|c| c.status)
        .max()
        .unwrap_or(Status::Healthy);
    let alerts = log.update(&components, chrono::Utc::now());
    Health {
        status,
        components,
        metrics,
        alerts,
        node: node(engine).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn components(store: Status) -> Components {
        Components {
            task_store: Component {
                status: store,
                detail: format!("{store:?}"),
            },
            sandbox_manager: ok("fine"),
            permission_manager: ok("fine"),
            audit_logger: ok("fine"),
        }
    }

    #[test]
    fn an_alert_keeps_its_first_time_and_is_kept_an_hour_once_resolved() {
        let log = AlertLog::default();
        let t0 = chrono::Utc::now();
        let first = log.update(&components(Status::Unhealthy), t0);
        assert_eq!(first.len(), 1);
        assert_eq!(
            (first[0].component.as_str(), first[0].resolved),
            ("task_store", false)
        );
        let later = log.update(
            &components(Status::Unhealthy),
            t0 + chrono::Duration::minutes(5),
        );
        assert_eq!(
            later[0].timestamp, t0,
            "the same problem keeps its first time"
        );
        let t1 = t0 + chrono::Duration::minutes(10);
        let resolved = log.update(&components(Status::Healthy), t1);
        assert_eq!(
            (resolved[0].resolved, resolved[0].resolved_at),
            (true, Some(t1))
        );
        assert_eq!(
            log.update(
                &components(Status::Healthy),
                t1 + chrono::Duration::minutes(59)
            )
            .len(),
            1
        );
        assert!(
            log.update(&components(Status::Healthy), t1 + RESOLVED_KEPT)
                .is_empty()
        );
    }
}
