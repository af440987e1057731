//! The engine's `tracing` spans: one per task run and one per step attempt, the
//! step's a child of the task's, each carrying the trace and span ids its events
//! carry. It lives in its own test binary, away from `tests/all.rs`: the engine
//! tests there hit the same span callsites on other threads with no subscriber,
//! and they race with this test's subscriber over `tracing`'s per-callsite
//! interest cache, which can leave the spans disabled.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rein_protocol::{EventType, HarnessEvent, TaskStatus};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

mod common;
use common::*;

#[derive(Debug, Clone)]
struct Recorded {
    name: &'static str,
    fields: HashMap<String, String>,
    parent: Option<&'static str>,
    parent_fields: HashMap<String, String>,
    /// Times the span was entered: a span that is created but never entered does
    /// not cover the work it names.
    entered: usize,
    id: Id,
}

#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<Recorded>>>);

struct Fields(HashMap<String, String>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

/// What a span's fields were recorded as, kept in the span's extensions so a child
/// can see its parent's.
struct Kept(HashMap<String, String>);

impl<S> tracing_subscriber::Layer<S> for Recorder
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = Fields(HashMap::new());
        attrs.record(&mut fields);
        let span = ctx.span(id).unwrap();
        let (parent, parent_fields) = span.parent().map_or((None, HashMap::new()), |p| {
            let kept = p
                .extensions()
                .get::<Kept>()
                .map(|k| k.0.clone())
                .unwrap_or_default();
            (Some(p.name()), kept)
        });
        span.extensions_mut().insert(Kept(fields.0.clone()));
        self.0.lock().unwrap().push(Recorded {
            name: attrs.metadata().name(),
            fields: fields.0,
            parent,
            parent_fields,
            entered: 0,
            id: id.clone(),
        });
    }

    fn on_enter(&self, id: &Id, _ctx: Context<'_, S>) {
        let mut spans = self.0.lock().unwrap();
        if let Some(s) = spans.iter_mut().find(|s| &s.id == id) {
            s.entered += 1;
        }
    }
}

#[tokio::test]
async fn task_and_step_spans_carry_the_ids_of_their_events() {
    let recorder = Recorder::default();
    let subscriber = tracing_subscriber::registry().with(recorder.clone());
    // The test's runtime is single-threaded, so a thread default covers every task
    // the engine spawns.
    let _guard = tracing::subscriber::set_default(subscriber);

    let h = harness();
    let state = h
        .run(plan(vec![
            step("a", "true", &[]),
            step("b", "true", &["a"]),
        ]))
        .await;
    assert_eq!(state.status(), TaskStatus::Completed);
    let log = h.log(&state).await;
    let spans = recorder.0.lock().unwrap().clone();

    let tasks: Vec<&Recorded> = spans.iter().filter(|s| s.name == "task").collect();
    assert_eq!(tasks.len(), 1, "one span per task run: {spans:?}");
    let task = tasks[0];
    assert!(task.entered > 0, "the runner drives inside the task's span");
    assert_eq!(task.fields["task_id"], state.head.id.to_string());
    assert_eq!(task.fields["trace_id"], state.head.trace_id);
    assert_eq!(task.fields["span_id"], state.head.span_id);

    let steps: Vec<&Recorded> = spans.iter().filter(|s| s.name == "step").collect();
    let ids: Vec<&str> = steps.iter().map(|s| s.fields["step_id"].as_str()).collect();
    assert_eq!(ids, vec!["a", "b"]);
    for s in &steps {
        assert!(s.entered > 0, "the step runs inside its span");
        assert_eq!(
            s.parent,
            Some("task"),
            "a step span is a child of its task's"
        );
        assert_eq!(s.parent_fields["task_id"], state.head.id.to_string());
        assert_eq!(s.fields["trace_id"], state.head.trace_id);
        // The span's ids are those of the step's checkpoint_entered event.
        let entered: &HarnessEvent = log
            .iter()
            .find(|e| {
                e.event_type() == EventType::CheckpointEntered
                    && e.checkpoint_id.as_ref().map(ToString::to_string)
                        == Some(s.fields["checkpoint_id"].clone())
            })
            .expect("the span names a checkpoint in the log");
        assert_eq!(s.fields["span_id"], entered.span_id);
        assert_eq!(s.fields["attempt"], "1");
    }
}
