//! Spans: how a task's trace is exported over OpenTelemetry with the ids its
//! events carry, and how a caller's `traceparent` is followed.

use rein_protocol::TaskState;

/// Makes `span` part of the task's trace when spans are exported over
/// OpenTelemetry: its parent becomes the task's root span (as a remote parent), so
/// the exported trace id is the one every event of the task carries. Without an
/// OpenTelemetry layer installed this does nothing.
pub(crate) fn link_to_task_trace(span: &tracing::Span, trace_id: &str, span_id: &str) {
    use opentelemetry::trace::{
        SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState,
    };
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    let (Ok(trace), Ok(parent)) = (TraceId::from_hex(trace_id), SpanId::from_hex(span_id)) else {
        return;
    };
    let context = SpanContext::new(trace, parent, TraceFlags::SAMPLED, true, TraceState::NONE);
    // Fails only when the span is disabled or already started; either way the
    // run goes on untraced.
    let _ = span.set_parent(opentelemetry::Context::new().with_remote_span_context(context));
}

/// The trace and span (hex) of the current span when it is in a trace an
/// exporter records (sampled): the caller a task is made under.
pub(crate) fn caller_span() -> Option<(String, String)> {
    use opentelemetry::trace::TraceContextExt;
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    let context = tracing::Span::current().context();
    let span = context.span();
    let caller = span.span_context();
    (caller.is_valid() && caller.is_sampled())
        .then(|| (caller.trace_id().to_string(), caller.span_id().to_string()))
}

/// Makes `span` (not yet started) a child of the caller's span a W3C
/// `traceparent` names, in the caller's trace; a malformed one is ignored.
pub fn follow_traceparent(span: &tracing::Span, header: &str) {
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    if let Some(parent) = parse_traceparent(header) {
        let _ = span.set_parent(parent);
    }
}

/// A W3C `traceparent` (`00-TRACE-SPAN-FLAGS`) as the remote parent
/// context it names; `None` for one that is not well formed (or all zeros).
pub fn parse_traceparent(header: &str) -> Option<opentelemetry::Context> {
    use opentelemetry::trace::{
        SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState,
    };
    let mut parts = header.trim().split('-');
    let (Some(version), Some(trace), Some(span), Some(flags)) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return None;
    };
    if version.len() != 2 || version == "ff" || trace.len() != 32 || span.len() != 16 {
        return None;
    }
    let flags = u8::from_str_radix(flags, 16).ok()?;
    let context = SpanContext::new(
        TraceId::from_hex(trace).ok()?,
        SpanId::from_hex(span).ok()?,
        TraceFlags::new(flags),
        true,
        TraceState::NONE,
    );
    context
        .is_valid()
        .then(|| opentelemetry::Context::new().with_remote_span_context(context))
}

thread_local! {
    /// The span id the next OpenTelemetry span made on this thread is to
    /// have (see [`with_span_id`]).
    static NEXT_SPAN_ID: std::cell::Cell<Option<opentelemetry::trace::SpanId>> =
        const { std::cell::Cell::new(None) };
}

/// The span id asked for the span being made on this thread, if one was:
/// an OpenTelemetry id generator gives it instead of a random one, so that
/// an exported span has the id its events carry.
pub fn take_next_span_id() -> Option<opentelemetry::trace::SpanId> {
    NEXT_SPAN_ID.with(std::cell::Cell::take)
}

/// Makes a `tracing` span with `make` whose exported span has the id
/// `span_id` (hex, as events carry it): the span is started at once, on this
/// thread, while its id is the one asked for.
pub(crate) fn with_span_id(span_id: &str, make: impl FnOnce() -> tracing::Span) -> tracing::Span {
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    let id = opentelemetry::trace::SpanId::from_hex(span_id).ok();
    NEXT_SPAN_ID.with(|next| next.set(id));
    let span = make();
    // Started now (its context built), so the id is taken here.
    let _ = span.context();
    NEXT_SPAN_ID.with(|next| next.set(None));
    span
}

/// The remote parent context of a span of `trace` under `parent` (hex);
/// empty (a root) without one.
fn caller_context(
    trace: opentelemetry::trace::TraceId,
    parent: Option<&str>,
) -> opentelemetry::Context {
    use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceState};
    match parent.and_then(|p| SpanId::from_hex(p).ok()) {
        Some(parent) => opentelemetry::Context::new().with_remote_span_context(SpanContext::new(
            trace,
            parent,
            TraceFlags::SAMPLED,
            true,
            TraceState::NONE,
        )),
        None => opentelemetry::Context::new(),
    }
}

/// Exports a span of the task's that `tracing` did not make (an approve
/// step's wait for a person): with the ids its events carry, from `start` to
/// now, under `parent` (hex) in the task's trace.
pub(crate) fn export_span(
    name: &'static str,
    trace_id: &str,
    span_id: &str,
    parent: Option<&str>,
    start: rein_protocol::Timestamp,
    attributes: Vec<opentelemetry::KeyValue>,
) {
    use opentelemetry::trace::{Span as _, SpanId, TraceId, Tracer as _};
    let (Ok(trace), Ok(span)) = (TraceId::from_hex(trace_id), SpanId::from_hex(span_id)) else {
        return;
    };
    let context = caller_context(trace, parent);
    let tracer = opentelemetry::global::tracer("rein");
    let mut exported = tracer
        .span_builder(name)
        .with_trace_id(trace)
        .with_span_id(span)
        .with_start_time(std::time::SystemTime::from(start))
        .with_attributes(attributes)
        .start_with_context(&tracer, &context);
    exported.end();
}

/// Exports the task's root span — the parent of every run's `task` span —
/// once the task has ended: from its creation to now, with the task's own
/// trace and span ids, through the OpenTelemetry tracer provider installed
/// for the process (nothing happens without one). Only the run that ends the
/// task sends it, so it goes once.
pub(crate) fn export_root_span(state: &TaskState) {
    use opentelemetry::KeyValue;
    use opentelemetry::trace::{Span as _, SpanId, TraceId, Tracer as _};
    let head = &state.head;
    let (Ok(trace), Ok(span)) = (
        TraceId::from_hex(&head.trace_id),
        SpanId::from_hex(&head.span_id),
    ) else {
        return;
    };
    let tracer = opentelemetry::global::tracer("rein");
    let mut root = tracer
        .span_builder("task_root")
        .with_trace_id(trace)
        .with_span_id(span)
        .with_start_time(std::time::SystemTime::from(head.created_at))
        .with_attributes(vec![
            KeyValue::new("task_id", head.id.to_string()),
            KeyValue::new("status", head.status.as_str()),
            KeyValue::new("description", head.description.clone()),
        ])
        // Not a child of the run's span, current here: a root, or the
        // caller's child when the task was made under one.
        .start_with_context(
            &tracer,
            &caller_context(trace, head.parent_span_id.as_deref()),
        );
    root.end();
}
