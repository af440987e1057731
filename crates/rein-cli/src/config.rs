//! The configuration, resolved once: `rein.toml` (`--config FILE`,
//! `REIN_CONFIG`, else `rein/rein.toml` in the XDG config directory, if it
//! exists), under the environment variables, under the flags. Every value
//! remembers where it came from, for `rein config show`; secrets are shown
//! redacted. A key the file does not know is an error naming it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rein_runtimes::anthropic::{ANTHROPIC_BASE_URL, AnthropicConfig};
use rein_runtimes::openai::{ChatConfig, DEFAULT_IDLE_TIMEOUT, OPENAI_BASE_URL};
use rein_runtimes::provider::Providers;
use serde::Deserialize;

use crate::exit::UsageError;

/// `rein.toml`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    data_dir: Option<PathBuf>,
    store: Option<String>,
    url: Option<String>,
    sandbox: Option<String>,
    policy: Option<PathBuf>,
    plugins: Option<Vec<PathBuf>>,
    runtime_policy: Option<PathBuf>,
    /// Directories declared for workspaces: a root rein accepts root's
    /// directories inside them (see `rein_sandbox::guard`).
    workspace_roots: Option<Vec<PathBuf>>,
    #[serde(default)]
    openai: OpenAiFile,
    #[serde(default)]
    anthropic: AnthropicFile,
    /// MCP tool servers agent steps may name (`mcp = ["fs"]`).
    #[serde(default)]
    mcp_servers: std::collections::BTreeMap<String, rein_core::plan::McpServerFile>,
    /// What rein knows of each model (`[models."PROVIDER/MODEL"]`): prices
    /// and context window.
    #[serde(default)]
    models: std::collections::BTreeMap<String, rein_protocol::ModelInfo>,
    /// The models (`PROVIDER/MODEL`) an agent step falls back to, in order,
    /// when it names none of its own.
    #[serde(default)]
    fallback_models: Vec<String>,
    /// What every task's model calls together may spend in a UTC day.
    #[serde(default)]
    daily_budget: Option<rein_protocol::Budget>,
    /// What of each task's workspace is kept at its step boundaries.
    #[serde(default)]
    snapshot: rein_protocol::SnapshotRules,
    /// Credential profiles isolated completions fall back across
    /// (`[auth_profiles.NAME]`), in `auth_order`, then by name.
    #[serde(default)]
    auth_profiles: std::collections::BTreeMap<String, AuthProfileFile>,
    #[serde(default)]
    auth_order: Vec<String>,
}

/// One credential profile: the provider it is for, and its key — given, or
/// read from an environment variable.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct AuthProfileFile {
    provider: Option<String>,
    api_key: Option<String>,
    api_key_env: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct OpenAiFile {
    base_url: Option<String>,
    api_key: Option<String>,
    model: Option<String>,
    idle_timeout: Option<String>,
    stream: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct AnthropicFile {
    base_url: Option<String>,
    api_key: Option<String>,
    model: Option<String>,
    max_tokens: Option<u32>,
    stream: Option<bool>,
}

/// One setting as `rein config show` prints it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Shown {
    pub key: String,
    /// `null` when unset; secrets as `<redacted>`.
    pub value: Option<String>,
    /// `flag --…`, `env NAME`, `file PATH`, or `default`.
    pub source: String,
}

/// What the flags and their variables gave (clap read both), and which.
#[derive(Debug, Default, Clone)]
pub struct FromCommandLine {
    pub data_dir: Option<PathBuf>,
    pub store: Option<String>,
    pub url: Option<String>,
    pub sandbox: Option<String>,
    pub policy: Option<PathBuf>,
    pub plugins: Vec<PathBuf>,
    pub runtime_policy: Option<PathBuf>,
    /// Per argument id: `flag --x` or `env NAME`.
    pub sources: std::collections::BTreeMap<&'static str, String>,
}

/// The configuration in force.
#[derive(Debug, Clone)]
pub struct Config {
    pub file: Option<PathBuf>,
    pub data_dir: Option<PathBuf>,
    /// A PostgreSQL URL; `None` is SQLite in the data directory.
    pub store: Option<String>,
    pub url: Option<String>,
    pub sandbox: String,
    pub policy: Option<PathBuf>,
    pub plugins: Vec<PathBuf>,
    pub runtime_policy: Option<PathBuf>,
    /// Directories declared for workspaces (`workspace_roots`,
    /// `REIN_WORKSPACE_ROOTS`).
    pub workspace_roots: Vec<PathBuf>,
    pub providers: Providers,
    /// The declared MCP servers, by name.
    pub mcp_servers: rein_runtimes::mcp::McpServers,
    /// Prices and context windows, by `PROVIDER/MODEL`.
    pub models: std::collections::BTreeMap<String, rein_protocol::ModelInfo>,
    /// The default fallback models of agent steps.
    pub fallback_models: Vec<String>,
    /// What all tasks' model calls may spend in a UTC day.
    pub daily_budget: Option<rein_protocol::Budget>,
    /// What of each task's workspace is kept at its step boundaries.
    pub snapshot: rein_protocol::SnapshotRules,
    /// The credential profiles, in the order isolated completions try them.
    pub auth_profiles: Vec<rein_runtimes::ProfileSpec>,
    pub shown: Vec<Shown>,
}

/// Where rein looks for a config file when none is named: `rein/rein.toml`
/// in the XDG config directory.
pub fn default_file() -> Option<PathBuf> {
    dirs::config_dir().map(|d| d.join("rein").join("rein.toml"))
}

/// The config file to read: the one named, else the XDG one if it exists.
fn locate(named: Option<&Path>) -> Result<Option<PathBuf>, UsageError> {
    if let Some(path) = named {
        if !path.is_file() {
            return Err(UsageError(format!(
                "config file {} does not exist (from --config or REIN_CONFIG)",
                path.display()
            )));
        }
        return Ok(Some(path.to_owned()));
    }
    Ok(default_file().filter(|p| p.is_file()))
}

fn read(path: &Path) -> Result<File, UsageError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| UsageError(format!("cannot read config file {}: {e}", path.display())))?;
    toml::from_str(&text).map_err(|e| {
        UsageError(format!(
            "config file {}: {}",
            path.display(),
            e.message().trim()
        ))
    })
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

impl Config {
    /// Resolves the configuration: flags (and the variables clap reads for
    /// them) over the file over the defaults; the providers' variables over
    /// the file over the defaults.
    pub fn resolve(config: Option<&Path>, given: FromCommandLine) -> Result<Config, UsageError> {
        let file_path = locate(config)?;
        let file = match &file_path {
            Some(p) => read(p)?,
            None => File::default(),
        };
        let in_file = file_path
            .as_ref()
            .map(|p| format!("file {}", p.display()))
            .unwrap_or_default();
        // A path in the file is relative to the file's directory.
        let base = file_path
            .as_ref()
            .and_then(|p| p.parent())
            .map(Path::to_owned)
            .unwrap_or_default();
        let anchored = |p: PathBuf| if p.is_absolute() { p } else { base.join(p) };
        let mut shown = Vec::new();
        let mut show = |key: &str, value: Option<String>, source: String| {
            shown.push(Shown {
                key: key.to_owned(),
                value,
                source,
            });
        };
        let source_of = |id: &str, set_in_file: bool| -> String {
            match given.sources.get(id) {
                Some(s) => s.clone(),
                None if set_in_file => in_file.clone(),
                None => "default".to_owned(),
            }
        };
        let display = |p: &Option<PathBuf>| p.as_ref().map(|p| p.display().to_string());

        let data_dir = given
            .data_dir
            .clone()
            .or(file.data_dir.clone().map(anchored));
        show(
            "data_dir",
            display(&data_dir)
                .or_else(|| dirs::data_dir().map(|d| d.join("rein").display().to_string())),
            source_of("data_dir", file.data_dir.is_some()),
        );
        let store = given.store.clone().or(file.store.clone());
        if let Some(s) = &store
            && !(s.starts_with("postgres://") || s.starts_with("postgresql://"))
        {
            let from = source_of("store", file.store.is_some());
            return Err(UsageError(format!(
                "store `{}` ({from}) is not a PostgreSQL URL: write postgres://USER@HOST:PORT/DATABASE, or leave it unset for SQLite in the data directory",
                rein_store::postgres::redacted(s)
            )));
        }
        show(
            "store",
            Some(store.as_deref().map_or(
                "(SQLite: rein.db in the data directory)".to_owned(),
                rein_store::postgres::redacted,
            )),
            source_of("store", file.store.is_some()),
        );
        let url = given.url.clone().or(file.url.clone());
        show("url", url.clone(), source_of("url", file.url.is_some()));
        let sandbox = given
            .sandbox
            .clone()
            .or(file.sandbox.clone())
            .unwrap_or_else(|| "auto".into());
        if !matches!(
            sandbox.as_str(),
            "auto" | "bubblewrap" | "landlock" | "none"
        ) {
            return Err(UsageError(format!(
                "{in_file}: sandbox = \"{sandbox}\"; use auto, bubblewrap, landlock or none"
            )));
        }
        show(
            "sandbox",
            Some(sandbox.clone()),
            source_of("sandbox", file.sandbox.is_some()),
        );
        let policy = given.policy.clone().or(file.policy.clone().map(anchored));
        show(
            "policy",
            display(&policy),
            source_of("policy", file.policy.is_some()),
        );
        let plugins = if given.plugins.is_empty() {
            file.plugins
                .clone()
                .unwrap_or_default()
                .into_iter()
                .map(anchored)
                .collect()
        } else {
            given.plugins.clone()
        };
        show(
            "plugins",
            Some(
                plugins
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(":"),
            )
            .filter(|s| !s.is_empty()),
            source_of(
                "plugins",
                given.plugins.is_empty() && file.plugins.is_some(),
            ),
        );
        let runtime_policy = given
            .runtime_policy
            .clone()
            .or(file.runtime_policy.clone().map(anchored));
        show(
            "runtime_policy",
            display(&runtime_policy),
            source_of("runtime_policy", file.runtime_policy.is_some()),
        );
        let (workspace_roots, roots_from): (Vec<PathBuf>, String) =
            match std::env::var_os("REIN_WORKSPACE_ROOTS").filter(|v| !v.is_empty()) {
                Some(v) => (
                    std::env::split_paths(&v)
                        .filter(|p| !p.as_os_str().is_empty())
                        .collect(),
                    "env REIN_WORKSPACE_ROOTS".to_owned(),
                ),
                None => match &file.workspace_roots {
                    Some(roots) => (
                        roots.iter().cloned().map(anchored).collect(),
                        in_file.clone(),
                    ),
                    None => (Vec::new(), "default".to_owned()),
                },
            };
        if let Some(relative) = workspace_roots.iter().find(|p| !p.is_absolute()) {
            return Err(UsageError(format!(
                "workspace_roots ({roots_from}): `{}` is not an absolute path",
                relative.display()
            )));
        }
        show(
            "workspace_roots",
            Some(
                workspace_roots
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(":"),
            )
            .filter(|s| !s.is_empty()),
            roots_from,
        );

        // A provider setting: its variable, else the file, else the default.
        let mut setting = |key: &str,
                           var: &str,
                           from_file: Option<String>,
                           default: Option<&str>,
                           secret: bool| {
            let (value, source) = match (env(var), from_file, default) {
                (Some(v), _, _) => (Some(v), format!("env {var}")),
                (None, Some(v), _) => (Some(v), in_file.clone()),
                (None, None, Some(d)) => (Some(d.to_owned()), "default".to_owned()),
                (None, None, None) => (None, "default".to_owned()),
            };
            let printed = if secret {
                value.as_ref().map(|_| "<redacted>".to_owned())
            } else {
                value.clone()
            };
            show(key, printed, source);
            value
        };
        let o = &file.openai;
        let openai_defaults = ChatConfig::default();
        let idle = setting(
            "openai.idle_timeout",
            "REIN_MODEL_IDLE_TIMEOUT",
            o.idle_timeout.clone(),
            Some("2m"),
            false,
        );
        let idle_timeout = match idle {
            None => DEFAULT_IDLE_TIMEOUT,
            Some(v) => humantime::parse_duration(v.trim())
                .ok()
                .filter(|d: &Duration| !d.is_zero())
                .ok_or_else(|| {
                    UsageError(format!(
                        "idle timeout `{v}` (REIN_MODEL_IDLE_TIMEOUT or openai.idle_timeout) is not a duration; write e.g. 90s or 5m"
                    ))
                })?,
        };
        // Whether a provider's answers come as a stream: `true` or `false`.
        let streaming = |key: &str, value: Option<String>| match value.as_deref().map(str::trim) {
            None | Some("true") => Ok(true),
            Some("false") => Ok(false),
            Some(other) => Err(UsageError(format!(
                "{key} is `{other}`; write true (answers streamed, the default) or false (one JSON body)"
            ))),
        };
        let openai_stream = streaming(
            "REIN_OPENAI_STREAM or openai.stream",
            setting(
                "openai.stream",
                "REIN_OPENAI_STREAM",
                o.stream.map(|b| b.to_string()),
                Some("true"),
                false,
            ),
        )?;
        let openai = ChatConfig {
            base_url: setting(
                "openai.base_url",
                "OPENAI_BASE_URL",
                o.base_url.clone(),
                Some(OPENAI_BASE_URL),
                false,
            )
            .unwrap_or_default(),
            api_key: setting(
                "openai.api_key",
                "OPENAI_API_KEY",
                o.api_key.clone(),
                None,
                true,
            ),
            model: setting(
                "openai.model",
                "REIN_MODEL",
                o.model.clone(),
                Some(&openai_defaults.model),
                false,
            )
            .unwrap_or_default(),
            idle_timeout,
            stream: openai_stream,
        };
        let a = &file.anthropic;
        let anthropic_defaults = AnthropicConfig::default();
        let max_tokens = setting(
            "anthropic.max_tokens",
            "REIN_ANTHROPIC_MAX_TOKENS",
            a.max_tokens.map(|n| n.to_string()),
            Some(&anthropic_defaults.max_tokens.to_string()),
            false,
        )
        .unwrap_or_default();
        let max_tokens = max_tokens.trim().parse().ok().filter(|n| *n > 0).ok_or_else(|| {
            UsageError(format!(
                "anthropic max tokens `{max_tokens}` (REIN_ANTHROPIC_MAX_TOKENS or anthropic.max_tokens) is not a positive number"
            ))
        })?;
        let anthropic_stream = streaming(
            "REIN_ANTHROPIC_STREAM or anthropic.stream",
            setting(
                "anthropic.stream",
                "REIN_ANTHROPIC_STREAM",
                a.stream.map(|b| b.to_string()),
                Some("true"),
                false,
            ),
        )?;
        let anthropic = AnthropicConfig {
            base_url: setting(
                "anthropic.base_url",
                "ANTHROPIC_BASE_URL",
                a.base_url.clone(),
                Some(ANTHROPIC_BASE_URL),
                false,
            )
            .unwrap_or_default(),
            api_key: setting(
                "anthropic.api_key",
                "ANTHROPIC_API_KEY",
                a.api_key.clone(),
                None,
                true,
            ),
            model: setting(
                "anthropic.model",
                "REIN_ANTHROPIC_MODEL",
                a.model.clone(),
                Some(&anthropic_defaults.model),
                false,
            )
            .unwrap_or_default(),
            max_tokens,
            idle_timeout,
            stream: anthropic_stream,
        };
        // MCP servers: only the file declares them. What their environment
        // and headers hold is shown redacted (keys and tokens live there).
        let mut mcp_servers = rein_runtimes::mcp::McpServers::new();
        let auth_profiles = auth_profiles(&file, &in_file)?;
        for (name, declared) in file.mcp_servers {
            let at = format!("{in_file}: mcp_servers.{name}");
            if !rein_core::plan::valid_mcp_name(&name) {
                return Err(UsageError(format!(
                    "{at}: a server's name has letters, digits, `-` and `_` (no `__`), at most 32"
                )));
            }
            let server = declared.resolve(&at, &base).map_err(UsageError)?;
            let redacted = |m: &std::collections::BTreeMap<String, String>| {
                m.keys()
                    .map(|k| format!("{k}=<redacted>"))
                    .collect::<Vec<_>>()
            };
            let value = match (&server.command, &server.url) {
                (Some(command), _) => {
                    let mut words = vec![command.clone()];
                    words.extend(server.args.iter().cloned());
                    let mut text = format!("stdio: {}", shell_words::join(words));
                    let env = redacted(&server.env);
                    if !env.is_empty() {
                        text.push_str(&format!(" (env {})", env.join(" ")));
                    }
                    text
                }
                (None, Some(url)) => {
                    let mut text = format!("http: {url}");
                    let headers = redacted(&server.headers);
                    if !headers.is_empty() {
                        text.push_str(&format!(" (headers {})", headers.join(" ")));
                    }
                    text
                }
                (None, None) => String::new(),
            };
            show(&format!("mcp_servers.{name}"), Some(value), in_file.clone());
            mcp_servers.insert(name, server);
        }
        for (name, info) in &file.models {
            let at = format!("{in_file}: models.\"{name}\"");
            match name.split_once('/') {
                Some((provider, model)) if !provider.is_empty() && !model.is_empty() => {}
                _ => {
                    return Err(UsageError(format!(
                        "{at}: name a model as \"PROVIDER/MODEL\", e.g. [models.\"openai/gpt-4.1-mini\"]"
                    )));
                }
            }
            info.check().map_err(|e| UsageError(format!("{at}: {e}")))?;
            let money = |p: Option<f64>| p.map_or("unpriced".to_owned(), |p| format!("${p}/Mtok"));
            let mut value = format!(
                "input {}, cached input {}, output {}",
                money(info.input_usd_per_mtok),
                money(info.cached_input_usd_per_mtok.or(info.input_usd_per_mtok)),
                money(info.output_usd_per_mtok)
            );
            if let Some(window) = info.context_window {
                value.push_str(&format!(", context window {window} tokens"));
            }
            show(&format!("models.{name}"), Some(value), in_file.clone());
        }
        for (i, name) in file.fallback_models.iter().enumerate() {
            rein_protocol::check_model_name(name)
                .map_err(|e| UsageError(format!("{in_file}: fallback_models: {e}")))?;
            if file.fallback_models[..i].contains(name) {
                return Err(UsageError(format!(
                    "{in_file}: fallback_models names `{name}` twice"
                )));
            }
        }
        if !file.fallback_models.is_empty() {
            show(
                "fallback_models",
                Some(file.fallback_models.join(", ")),
                in_file.clone(),
            );
        }
        if let Some(budget) = &file.daily_budget {
            budget
                .check()
                .map_err(|e| UsageError(format!("{in_file}: daily_budget: {e}")))?;
            let mut value = Vec::new();
            if let Some(t) = budget.tokens {
                value.push(format!("{t} tokens"));
            }
            if let Some(c) = budget.cost_usd {
                value.push(format!("${c}"));
            }
            show("daily_budget", Some(value.join(", ")), in_file.clone());
        }
        rein_core::saved::Excludes::new(&file.snapshot.exclude)
            .map_err(|e| UsageError(format!("{in_file}: {e}")))?;
        if !file.snapshot.exclude.is_empty() {
            show(
                "snapshot.exclude",
                Some(file.snapshot.exclude.join(", ")),
                in_file.clone(),
            );
        }
        show(
            "snapshot.max_bytes",
            Some(file.snapshot.cap().to_string()),
            match file.snapshot.max_bytes {
                Some(_) => in_file.clone(),
                None => "default".into(),
            },
        );
        if !auth_profiles.is_empty() {
            let listed: Vec<String> = auth_profiles
                .iter()
                .map(|p| format!("{} ({})", p.id, p.provider))
                .collect();
            show("auth_profiles", Some(listed.join(", ")), in_file.clone());
        }
        Ok(Config {
            file: file_path,
            data_dir,
            store,
            url,
            sandbox,
            policy,
            plugins,
            runtime_policy,
            workspace_roots,
            providers: Providers { openai, anthropic },
            mcp_servers,
            models: file.models,
            fallback_models: file.fallback_models,
            daily_budget: file.daily_budget,
            snapshot: file.snapshot,
            auth_profiles,
            shown,
        })
    }
}

/// `[auth_profiles.NAME]` resolved: each one's key (given, or from its
/// environment variable, which must be set), in `auth_order` and then by
/// name. Anything that does not add up is refused naming it.
fn auth_profiles(
    file: &File,
    in_file: &str,
) -> Result<Vec<rein_runtimes::ProfileSpec>, UsageError> {
    let bad = |m: String| UsageError(format!("{in_file}: {m}"));
    for (i, name) in file.auth_order.iter().enumerate() {
        if !file.auth_profiles.contains_key(name) {
            return Err(bad(format!(
                "auth_order names `{name}`, which is no [auth_profiles.{name}]"
            )));
        }
        if file.auth_order[..i].contains(name) {
            return Err(bad(format!("auth_order names `{name}` twice")));
        }
    }
    let order = file.auth_order.iter().chain(
        file.auth_profiles
            .keys()
            .filter(|k| !file.auth_order.contains(k)),
    );
    let mut out = Vec::new();
    for name in order {
        let p = &file.auth_profiles[name];
        let provider = p.provider.clone().unwrap_or_else(|| "openai".into());
        if !["openai", "openai-responses", "anthropic"].contains(&provider.as_str()) {
            return Err(bad(format!(
                "auth_profiles.{name}: provider `{provider}` is not one rein prepares requests for (openai, openai-responses, anthropic)"
            )));
        }
        let credential = match (&p.api_key, &p.api_key_env) {
            (Some(key), None) => key.clone(),
            (None, Some(var)) => std::env::var(var).map_err(|_| {
                bad(format!(
                    "auth_profiles.{name}: api_key_env `{var}` is not set in the environment"
                ))
            })?,
            _ => {
                return Err(bad(format!(
                    "auth_profiles.{name}: give its key as api_key or api_key_env (one of them)"
                )));
            }
        };
        out.push(rein_runtimes::ProfileSpec {
            id: name.clone(),
            provider,
            credential,
        });
    }
    Ok(out)
}
