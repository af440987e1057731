//! Where `tracing` output goes: `rein serve` logs to stderr (`RUST_LOG`, default
//! `warn`; a line per closed span at `info`), and every command exports its spans
//! over OTLP when `OTEL_EXPORTER_OTLP_ENDPOINT` (or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set: over HTTP as protobuf (the
//! default) or JSON, or over gRPC, as `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL` or
//! `OTEL_EXPORTER_OTLP_PROTOCOL` says (`http/protobuf`, `http/json`, `grpc`),
//! with the headers of `OTEL_EXPORTER_OTLP_TRACES_HEADERS` / `_HEADERS`. An
//! export that fails is reported once, naming the endpoint and what came back.
//! Other commands keep stderr for people.

use std::sync::atomic::{AtomicBool, Ordering};

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use tracing_subscriber::filter::{EnvFilter, LevelFilter};
use tracing_subscriber::fmt::format::FmtSpan;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{Layer, fmt};

use crate::output::shout;

/// Flushes exported spans when dropped; drop it outside the async runtime (the
/// exporter's HTTP client blocks).
#[derive(Debug)]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take()
            && let Err(e) = provider.shutdown()
        {
            shout!("warning: could not send the last spans to the OTLP endpoint: {e}");
        }
    }
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|s| !s.trim().is_empty())
}

/// Where spans go: the traces endpoint as given, else the base endpoint —
/// with `/v1/traces` over HTTP (what the exporter does with them; for the
/// warning).
fn endpoint(wire: Wire) -> Option<String> {
    env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").or_else(|| {
        env("OTEL_EXPORTER_OTLP_ENDPOINT").map(|base| match wire {
            Wire::Grpc => base,
            Wire::Http(_) => format!("{}/v1/traces", base.trim_end_matches('/')),
        })
    })
}

/// How spans are sent.
#[derive(Debug, Clone, Copy)]
enum Wire {
    Http(Protocol),
    Grpc,
}

/// The OTLP protocol asked for; `Err` names a value rein cannot speak.
fn protocol() -> Result<Wire, String> {
    let (var, value) = match env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") {
        Some(v) => ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", v),
        None => match env("OTEL_EXPORTER_OTLP_PROTOCOL") {
            Some(v) => ("OTEL_EXPORTER_OTLP_PROTOCOL", v),
            None => return Ok(Wire::Http(Protocol::HttpBinary)),
        },
    };
    match value.trim() {
        "http/protobuf" => Ok(Wire::Http(Protocol::HttpBinary)),
        "http/json" => Ok(Wire::Http(Protocol::HttpJson)),
        "grpc" => Ok(Wire::Grpc),
        other => Err(format!(
            "{var}=`{other}` is not an OTLP protocol; use http/protobuf (the default), http/json or grpc"
        )),
    }
}

/// The OTLP exporter, which says once that exporting fails (the endpoint,
/// and the status or error), then goes on quietly. A gRPC exporter's client
/// lives on a runtime of its own (`runtime`): the batch processor exports
/// from a plain thread, and the client outlives the command's runtime, which
/// is gone when the last spans are flushed.
#[derive(Debug)]
struct Reporting<E> {
    inner: E,
    endpoint: String,
    warned: AtomicBool,
    runtime: Option<tokio::runtime::Runtime>,
}

impl<E: SpanExporter> SpanExporter for Reporting<E> {
    fn export(
        &self,
        batch: Vec<SpanData>,
    ) -> impl std::future::Future<Output = OTelSdkResult> + Send {
        let exported = self.inner.export(batch);
        async move {
            let result = match &self.runtime {
                Some(runtime) => runtime.block_on(exported),
                None => exported.await,
            };
            if let Err(e) = &result
                && !self.warned.swap(true, Ordering::Relaxed)
            {
                shout!(
                    "warning: spans could not be exported to {}: {e}; later failures are not reported",
                    self.endpoint
                );
            }
            result
        }
    }

    fn shutdown_with_timeout(&mut self, timeout: std::time::Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&mut self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// Span ids as the task's events carry them where the engine asks for one
/// (a step's span), random otherwise.
#[derive(Debug, Default)]
struct EventIds(opentelemetry_sdk::trace::RandomIdGenerator);

impl opentelemetry_sdk::trace::IdGenerator for EventIds {
    fn new_trace_id(&self) -> opentelemetry::trace::TraceId {
        self.0.new_trace_id()
    }

    fn new_span_id(&self) -> opentelemetry::trace::SpanId {
        rein_core::engine::take_next_span_id().unwrap_or_else(|| self.0.new_span_id())
    }
}

/// The exporter for `wire`, with the runtime a gRPC one needs.
fn exporter(
    wire: Wire,
) -> Result<
    (
        opentelemetry_otlp::SpanExporter,
        Option<tokio::runtime::Runtime>,
    ),
    String,
> {
    let failed = |e: opentelemetry_otlp::ExporterBuildError| {
        format!("the OTLP exporter could not be set up ({e}); check OTEL_EXPORTER_OTLP_ENDPOINT")
    };
    match wire {
        Wire::Http(protocol) => opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(protocol)
            .build()
            .map(|e| (e, None))
            .map_err(failed),
        Wire::Grpc => {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("rein-otlp")
                .enable_all()
                .build()
                .map_err(|e| format!("cannot start the OTLP exporter's runtime: {e}"))?;
            // The client's connection task is spawned on that runtime.
            let exporter = {
                let _inside = runtime.enter();
                opentelemetry_otlp::SpanExporter::builder()
                    .with_tonic()
                    .build()
                    .map_err(failed)?
            };
            Ok((exporter, Some(runtime)))
        }
    }
}

/// The tracer provider exporting over OTLP, if an endpoint is set.
fn otlp() -> Option<SdkTracerProvider> {
    let wire = match protocol() {
        Ok(w) => w,
        Err(why) => {
            endpoint(Wire::Grpc)?;
            shout!("warning: not exporting spans: {why}");
            return None;
        }
    };
    let endpoint = endpoint(wire)?;
    match exporter(wire) {
        Ok((exporter, runtime)) => Some(
            SdkTracerProvider::builder()
                .with_batch_exporter(Reporting {
                    inner: exporter,
                    endpoint,
                    warned: AtomicBool::new(false),
                    runtime,
                })
                .with_resource(Resource::builder().with_service_name("rein").build())
                .with_id_generator(EventIds::default())
                .build(),
        ),
        Err(why) => {
            shout!("warning: not exporting spans: {why}");
            None
        }
    }
}

/// Installs the subscriber for this process. Call before the async runtime starts.
pub fn init(log_to_stderr: bool) -> Telemetry {
    let provider = otlp();
    // The engine exports each task's root span through the global provider.
    if let Some(p) = &provider {
        opentelemetry::global::set_tracer_provider(p.clone());
    }
    let otel = provider.as_ref().map(|p| {
        tracing_opentelemetry::layer()
            .with_tracer(p.tracer("rein"))
            .with_filter(LevelFilter::INFO)
    });
    let log = log_to_stderr.then(|| {
        let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
        fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            // A line as each request, task run and step attempt closes, with its time.
            .with_span_events(FmtSpan::CLOSE)
            .with_filter(filter)
    });
    // Only fails if a subscriber is already installed, which nothing else does.
    let _ = tracing_subscriber::registry()
        .with(log)
        .with(otel)
        .try_init();
    Telemetry { provider }
}
