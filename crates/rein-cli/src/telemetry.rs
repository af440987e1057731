//! Where `tracing` output goes: `rein serve` logs to stderr (`RUST_LOG`, default
//! `warn`; a line per closed span at `info`), and every command exports its spans
//! over OTLP/HTTP (JSON) when `OTEL_EXPORTER_OTLP_ENDPOINT` (or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set. Other commands keep stderr for
//! people.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
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

fn otlp_configured() -> bool {
    [
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    ]
    .iter()
    .any(|v| std::env::var(v).is_ok_and(|s| !s.trim().is_empty()))
}

/// Installs the subscriber for this process. Call before the async runtime starts.
pub fn init(log_to_stderr: bool) -> Telemetry {
    let provider = if otlp_configured() {
        match opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .build()
        {
            Ok(exporter) => Some(
                SdkTracerProvider::builder()
                    .with_batch_exporter(exporter)
                    .with_resource(Resource::builder().with_service_name("rein").build())
                    .build(),
            ),
            Err(e) => {
                shout!(
                    "warning: not exporting spans: the OTLP exporter could not be set up ({e}); \
                     check OTEL_EXPORTER_OTLP_ENDPOINT"
                );
                None
            }
        }
    } else {
        None
    };
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
