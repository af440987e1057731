//! Where `tracing` output goes: `rein serve` logs to stderr (`RUST_LOG`, default
//! `warn`; a line per closed span at `info`), and every command exports its spans
//! over OTLP when `OTEL_EXPORTER_OTLP_ENDPOINT` (or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set: over HTTP as protobuf (the
//! default) or JSON, as `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL` or
//! `OTEL_EXPORTER_OTLP_PROTOCOL` says (`http/protobuf`, `http/json`), with the
//! headers of `OTEL_EXPORTER_OTLP_TRACES_HEADERS` / `_HEADERS`. An export that
//! fails is reported once, naming the endpoint and what came back. Other
//! commands keep stderr for people.

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

/// Where spans go: the traces endpoint as given, else the base endpoint
/// with `/v1/traces` (what the exporter does with them; for the warning).
fn endpoint() -> Option<String> {
    env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").or_else(|| {
        env("OTEL_EXPORTER_OTLP_ENDPOINT")
            .map(|base| format!("{}/v1/traces", base.trim_end_matches('/')))
    })
}

/// The OTLP protocol asked for; `Err` names a value rein cannot speak.
fn protocol() -> Result<Protocol, String> {
    let (var, value) = match env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") {
        Some(v) => ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", v),
        None => match env("OTEL_EXPORTER_OTLP_PROTOCOL") {
            Some(v) => ("OTEL_EXPORTER_OTLP_PROTOCOL", v),
            None => return Ok(Protocol::HttpBinary),
        },
    };
    match value.trim() {
        "http/protobuf" => Ok(Protocol::HttpBinary),
        "http/json" => Ok(Protocol::HttpJson),
        "grpc" => Err(format!(
            "{var}=grpc is not supported by this rein; use http/protobuf (the default) or http/json, which every OTLP receiver takes on its HTTP port (4318)"
        )),
        other => Err(format!(
            "{var}=`{other}` is not an OTLP protocol; use http/protobuf (the default) or http/json"
        )),
    }
}

/// The OTLP exporter, which says once that exporting fails (the endpoint,
/// and the status or error), then goes on quietly.
#[derive(Debug)]
struct Reporting<E> {
    inner: E,
    endpoint: String,
    warned: AtomicBool,
}

impl<E: SpanExporter> SpanExporter for Reporting<E> {
    fn export(
        &self,
        batch: Vec<SpanData>,
    ) -> impl std::future::Future<Output = OTelSdkResult> + Send {
        let exported = self.inner.export(batch);
        async move {
            let result = exported.await;
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

/// The tracer provider exporting over OTLP, if an endpoint is set.
fn otlp() -> Option<SdkTracerProvider> {
    let endpoint = endpoint()?;
    let built = protocol().and_then(|protocol| {
        opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(protocol)
            .build()
            .map_err(|e| {
                format!(
                    "the OTLP exporter could not be set up ({e}); check OTEL_EXPORTER_OTLP_ENDPOINT"
                )
            })
    });
    match built {
        Ok(exporter) => Some(
            SdkTracerProvider::builder()
                .with_batch_exporter(Reporting {
                    inner: exporter,
                    endpoint,
                    warned: AtomicBool::new(false),
                })
                .with_resource(Resource::builder().with_service_name("rein").build())
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
