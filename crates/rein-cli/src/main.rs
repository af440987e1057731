//! `rein`: the command-line front end. It parses arguments, calls the engine and
//! prints; everything else lives in the library crates.
//!
//! Layout: [`cli`] (arguments; `cli::tasks` those of `rein tasks`), [`commands`] (one module per command group),
//! [`backend`] (the operations commands call, on the store here or a server),
//! [`client`] (the admin API's client: over HTTP, or to the router in-process),
//! [`progress`] (live progress of a run), [`prompt`] (approvals asked inline), [`render`] (human-readable output),
//! [`config`] (`rein.toml`, the environment and flags resolved into one configuration),
//! [`exit`] (the one mapping from errors to exit codes), [`output`] (printing that
//! survives a closed pipe), [`telemetry`] (logs and span export).

mod backend;
mod cli;
mod client;
mod commands;
mod config;
mod exit;
mod output;
mod progress;
mod prompt;
mod render;
mod telemetry;

use std::process::ExitCode;

use clap::FromArgMatches;

use crate::output::shout;

fn main() -> ExitCode {
    // `rein __confine …`: the Landlock trampoline a sandboxed step starts as. It
    // confines itself and becomes the step's command; it never returns on success.
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == commands::CONFINE) {
        let code = rein_sandbox::landlock::trampoline(&args[2..]);
        return ExitCode::from(u8::try_from(code).unwrap_or(exit::FAILURE));
    }
    let matches = cli::command().get_matches();
    let json = wants_json(&matches);
    let mut cli = match cli::Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    for (id, flag, var) in cli::GLOBAL_SETTINGS {
        let source = match matches.value_source(id) {
            Some(clap::parser::ValueSource::CommandLine) => format!("flag {flag}"),
            Some(clap::parser::ValueSource::EnvVariable) => format!("env {var}"),
            _ => continue,
        };
        cli.sources.insert(id, source);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            shout!("error: cannot start the async runtime: {e}");
            return ExitCode::from(exit::FAILURE);
        }
    };
    let telemetry = telemetry::init(matches!(cli.command, cli::Command::Serve(_)));
    // Under a traced parent (TRACEPARENT, as W3C trace context propagation
    // through the environment has it), the command is a span of the
    // parent's trace, and a task it makes is in that trace.
    let result = match std::env::var("TRACEPARENT")
        .ok()
        .filter(|t| !t.trim().is_empty())
    {
        Some(parent) if !matches!(cli.command, cli::Command::Serve(_)) => {
            use tracing::Instrument as _;
            let span = tracing::info_span!("rein", otel.kind = "client");
            rein_core::engine::follow_traceparent(&span, &parent);
            runtime.block_on(commands::dispatch(cli).instrument(span))
        }
        _ => runtime.block_on(commands::dispatch(cli)),
    };
    // Spans are flushed outside the runtime: the exporter's client blocks.
    drop(runtime);
    drop(telemetry);
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            shout!("error: {e:#}");
            // A script that asked for JSON gets the error as JSON on stdout
            // too, in the API's shape.
            if json {
                let error = serde_json::json!({ "error": {
                    "code": exit::error_code(&e),
                    "message": format!("{e:#}"),
                } });
                output::say!(
                    "{}",
                    serde_json::to_string_pretty(&error).unwrap_or_default()
                );
            }
            ExitCode::from(exit::code_for(&e))
        }
    }
}

/// Whether the command asked for JSON (`--json` of the innermost
/// subcommand).
fn wants_json(matches: &clap::ArgMatches) -> bool {
    match matches.subcommand() {
        Some((_, sub)) => wants_json(sub),
        None => matches!(matches.try_get_one::<bool>("json"), Ok(Some(true))),
    }
}
