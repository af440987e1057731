//! The metrics of spec §6 rule 21 in the Prometheus text format: `rein_` prefix,
//! units in the names, counters ending in `_total`.

use std::fmt::Write;

use rein_protocol::HarnessMetrics;

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn sample(out: &mut String, name: &str, labels: &[(&str, &str)], value: f64) {
    if labels.is_empty() {
        let _ = writeln!(out, "{name} {value}");
    } else {
        let labels: Vec<String> = labels
            .iter()
            .map(|(k, v)| format!("{k}=\"{}\"", v.replace('\\', "\\\\").replace('"', "\\\"")))
            .collect();
        let _ = writeln!(out, "{name}{{{}}} {value}", labels.join(","));
    }
}

pub fn render(m: &HarnessMetrics) -> String {
    let mut out = String::new();
    let t = &m.tasks;
    family(
        &mut out,
        "rein_tasks",
        "gauge",
        "Tasks in the store, by status.",
    );
    for (status, n) in [
        ("pending", t.pending),
        ("in_progress", t.in_progress),
        ("completed", t.completed),
        ("failed", t.failed),
        ("paused", t.paused),
        ("cancelled", t.cancelled),
    ] {
        sample(&mut out, "rein_tasks", &[("status", status)], n as f64);
    }
    family(
        &mut out,
        "rein_task_duration_seconds_average",
        "gauge",
        "Mean time from creation to the end of finished tasks.",
    );
    sample(
        &mut out,
        "rein_task_duration_seconds_average",
        &[],
        t.average_duration_ms.unwrap_or(0.0) / 1000.0,
    );

    let c = &m.checkpoints;
    family(
        &mut out,
        "rein_checkpoints_total",
        "counter",
        "Checkpoints recorded, by type.",
    );
    for (kind, n) in &c.by_type {
        sample(
            &mut out,
            "rein_checkpoints_total",
            &[("type", kind)],
            *n as f64,
        );
    }
    family(
        &mut out,
        "rein_checkpoint_outcomes_total",
        "counter",
        "Checkpoints that ended, by outcome.",
    );
    for (outcome, n) in [
        ("passed", c.passed),
        ("failed", c.failed),
        ("skipped", c.skipped),
    ] {
        sample(
            &mut out,
            "rein_checkpoint_outcomes_total",
            &[("outcome", outcome)],
            n as f64,
        );
    }
    family(
        &mut out,
        "rein_checkpoint_duration_seconds_average",
        "gauge",
        "Mean duration of checkpoints that passed or failed.",
    );
    sample(
        &mut out,
        "rein_checkpoint_duration_seconds_average",
        &[],
        c.average_duration_ms.unwrap_or(0.0) / 1000.0,
    );

    let r = &m.recovery;
    family(
        &mut out,
        "rein_recovery_total",
        "counter",
        "Recovery attempts, successes and failures.",
    );
    for (outcome, n) in [
        ("attempted", r.attempts),
        ("succeeded", r.successes),
        ("failed", r.failures),
    ] {
        sample(
            &mut out,
            "rein_recovery_total",
            &[("outcome", outcome)],
            n as f64,
        );
    }
    family(
        &mut out,
        "rein_recovery_by_error_type_total",
        "counter",
        "Recovery attempts and give-ups, by error type.",
    );
    for (kind, n) in &r.by_error_type {
        sample(
            &mut out,
            "rein_recovery_by_error_type_total",
            &[("error_type", kind)],
            *n as f64,
        );
    }

    let h = &m.human_loop;
    family(
        &mut out,
        "rein_approval_requests",
        "gauge",
        "Approval requests, by status.",
    );
    for (status, n) in [
        ("pending", h.pending),
        ("approved", h.approvals),
        ("denied", h.denials),
        ("skipped", h.skips),
        ("expired", h.expirations),
    ] {
        sample(
            &mut out,
            "rein_approval_requests",
            &[("status", status)],
            n as f64,
        );
    }
    family(
        &mut out,
        "rein_approval_response_seconds_average",
        "gauge",
        "Mean time from a request to a person's decision.",
    );
    sample(
        &mut out,
        "rein_approval_response_seconds_average",
        &[],
        h.average_response_ms.unwrap_or(0.0) / 1000.0,
    );
    out
}

/// The model calls the store metered (every agent turn's usage), by
/// provider and model: calls, and tokens by kind (`input` counts every
/// prompt token, `cached_input` the cached part of them).
pub fn render_usage(
    out: &mut String,
    rows: &[rein_core::store::UsageRow],
    models: &rein_protocol::Models,
) {
    family(
        out,
        "rein_model_calls_total",
        "counter",
        "Model calls metered, by provider and model.",
    );
    for r in rows {
        let labels = [
            ("provider", r.provider.as_str()),
            ("model", r.model.as_str()),
        ];
        sample(out, "rein_model_calls_total", &labels, r.calls as f64);
    }
    family(
        out,
        "rein_model_tokens_total",
        "counter",
        "Model tokens metered, by provider, model and kind (input includes cached_input).",
    );
    for r in rows {
        for (kind, n) in [
            ("input", r.usage.input_tokens),
            ("cached_input", r.usage.cached_input_tokens),
            ("output", r.usage.output_tokens),
        ] {
            let labels = [
                ("provider", r.provider.as_str()),
                ("model", r.model.as_str()),
                ("kind", kind),
            ];
            sample(out, "rein_model_tokens_total", &labels, n as f64);
        }
    }
    family(
        out,
        "rein_model_cost_usd_total",
        "counter",
        "What metered model calls cost in US dollars at the configured prices, by provider and model (a model without a price has no sample).",
    );
    for r in rows {
        let priced = models
            .get(&format!("{}/{}", r.provider, r.model))
            .and_then(|m| m.cost_usd(&r.usage));
        if let Some(dollars) = priced {
            let labels = [
                ("provider", r.provider.as_str()),
                ("model", r.model.as_str()),
            ];
            sample(out, "rein_model_cost_usd_total", &labels, dollars);
        }
    }
}
