//! Permission rules: allow, ask or deny, for commands (a program and its
//! arguments, as globs), for paths a step declares it reads or writes beyond its
//! workspace, for network use, and for the tools of MCP servers. The strictest matching rule decides: deny
//! over ask over allow; with no matching rule, the policy's default does.
//!
//! A step's script is split into its simple commands (at unquoted `;`, `&`,
//! `&&`, `|`, `||` and newlines; the bodies of `$(…)` and backquotes are checked
//! as commands too) and each is checked; the script gets the strictest verdict of
//! its commands. A script that cannot be split (an unclosed quote) is asked about.
//! This is a check of what a script says, not of what it may compute at run
//! time (`eval "$x"` runs whatever `$x` holds): the sandbox is what contains it.

use std::path::Path;

use globset::{GlobBuilder, GlobMatcher};
pub use rein_protocol::{Access, AskTrigger, PermissionDecision, PermissionRule, Verdict};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("cannot read the policy file {path}: {detail}")]
    Read { path: String, detail: String },
    #[error("{source_name}: {detail}")]
    Invalid { source_name: String, detail: String },
}

/// A policy file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyFile {
    /// The verdict where no rule matches (allow unless set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<Verdict>,
    /// What a step the plan marks `risk_level = "high"` gets, whatever it
    /// runs: `ask` (a person decides before it runs) unless set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub high_risk: Option<Verdict>,
    #[serde(default)]
    pub rules: Vec<PermissionRule>,
}

#[derive(Debug, Clone)]
enum Matcher {
    Command {
        program: GlobMatcher,
        args: Vec<ArgPattern>,
    },
    Path {
        glob: GlobMatcher,
        /// For `DIR/**`: `DIR` itself, which a step declaring the directory
        /// names (reading it is reading what is below it).
        dir: Option<GlobMatcher>,
        access: Option<Access>,
    },
    Network {
        host: GlobMatcher,
    },
    /// `SERVER/TOOL` of an MCP tool.
    Mcp {
        tool: GlobMatcher,
    },
}

#[derive(Debug, Clone)]
enum ArgPattern {
    Any,
    One(GlobMatcher),
}

#[derive(Debug, Clone)]
struct Rule {
    /// Where it was written: "rule 3 of policy.toml".
    origin: String,
    /// What it says, as written: "deny command `rm -rf /*`".
    text: String,
    verdict: Verdict,
    matcher: Matcher,
    reason: Option<String>,
    trigger: AskTrigger,
}

/// Rules, in order, and the default.
#[derive(Debug, Clone)]
pub struct Policy {
    rules: Vec<Rule>,
    default: Verdict,
    /// Where the default comes from, for decisions no rule made.
    default_origin: String,
    /// Where the rules come from, with how many each gave.
    sources: Vec<(String, usize)>,
    /// The verdict on a high-risk step, and where it comes from.
    high_risk: (Verdict, String),
}

/// Where the verdict on high-risk steps comes from when no policy sets it.
const DEFAULT_HIGH_RISK: &str =
    "high-risk steps ask a person by default (set high_risk in the policy file)";

impl Default for Policy {
    fn default() -> Policy {
        Policy {
            rules: Vec::new(),
            default: Verdict::Allow,
            default_origin: "no rules are configured".into(),
            sources: Vec::new(),
            high_risk: (Verdict::Ask, DEFAULT_HIGH_RISK.into()),
        }
    }
}

/// What the policy says about something, and which rule said it.
pub type Decision = PermissionDecision;

fn glob(pattern: &str, separator: bool) -> Result<GlobMatcher, String> {
    GlobBuilder::new(pattern)
        .literal_separator(separator)
        .backslash_escape(true)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| format!("`{pattern}` is not a valid pattern: {e}"))
}

impl Policy {
    /// Reads a policy file (TOML).
    pub fn load(path: &Path) -> Result<Policy, PolicyError> {
        let text = std::fs::read_to_string(path).map_err(|e| PolicyError::Read {
            path: path.display().to_string(),
            detail: e.to_string(),
        })?;
        Policy::parse(&text, &path.display().to_string())
    }

    /// Parses a policy file's text; `source_name` names it in errors and decisions.
    pub fn parse(text: &str, source_name: &str) -> Result<Policy, PolicyError> {
        let file: PolicyFile = toml::from_str(text).map_err(|e| PolicyError::Invalid {
            source_name: source_name.to_owned(),
            detail: e.to_string(),
        })?;
        Policy::from_file(&file, source_name)
    }

    pub fn from_file(file: &PolicyFile, source_name: &str) -> Result<Policy, PolicyError> {
        let mut policy = Policy {
            default: file.default.unwrap_or(Verdict::Allow),
            default_origin: match file.default {
                Some(v) => format!("the default of {source_name} ({})", v.as_str()),
                None => format!("no rule of {source_name} matches (default allow)"),
            },
            rules: Vec::new(),
            sources: Vec::new(),
            high_risk: match file.high_risk {
                Some(v) => (
                    v,
                    format!("high_risk = \"{}\" of {source_name}", v.as_str()),
                ),
                None => (Verdict::Ask, DEFAULT_HIGH_RISK.into()),
            },
        };
        policy.add_rules(&file.rules, source_name)?;
        Ok(policy)
    }

    /// The policy in force, in a line: its rules by source, and its default.
    pub fn describe(&self) -> String {
        if self.sources.is_empty() {
            return format!("no rules (default {})", self.default.as_str());
        }
        let sources: Vec<String> = self
            .sources
            .iter()
            .map(|(source, n)| format!("{n} from {source}"))
            .collect();
        format!(
            "{} rule(s): {}; default {}",
            self.rules.len(),
            sources.join(", "),
            self.default.as_str()
        )
    }

    /// Adds rules after the ones there (a step's own, over the configured ones).
    pub fn add_rules(
        &mut self,
        specs: &[PermissionRule],
        source_name: &str,
    ) -> Result<(), PolicyError> {
        if !specs.is_empty() {
            self.sources.push((source_name.to_owned(), specs.len()));
        }
        for (i, spec) in specs.iter().enumerate() {
            let origin = format!("rule {} of {source_name}", i + 1);
            let rule =
                Rule::compile(spec, origin.clone()).map_err(|detail| PolicyError::Invalid {
                    source_name: source_name.to_owned(),
                    detail: format!("{origin}: {detail}"),
                })?;
            self.rules.push(rule);
        }
        Ok(())
    }

    /// The verdict on a step its plan marks high-risk, whatever it runs.
    pub fn check_high_risk(&self, step: &str) -> Decision {
        let (verdict, rule) = &self.high_risk;
        Decision {
            verdict: *verdict,
            subject: format!("high-risk step `{step}`"),
            rule: rule.clone(),
            reason: None,
            trigger: (*verdict == Verdict::Ask).then_some(AskTrigger::DestructiveAction),
        }
    }

    /// Whether `decision` is only the policy's default: no rule matched.
    pub fn is_default(&self, decision: &Decision) -> bool {
        decision.rule == self.default_origin
    }

    /// How many rules the policy has.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    fn decide(&self, subject: String, matches: impl Fn(&Matcher) -> Option<bool>) -> Decision {
        let mut best: Option<&Rule> = None;
        for rule in &self.rules {
            if matches(&rule.matcher) == Some(true) && best.is_none_or(|b| rule.verdict > b.verdict)
            {
                best = Some(rule);
            }
        }
        match best {
            Some(rule) => Decision {
                verdict: rule.verdict,
                subject,
                rule: format!("{}: {}", rule.origin, rule.text),
                reason: rule.reason.clone(),
                trigger: (rule.verdict == Verdict::Ask).then_some(rule.trigger),
            },
            None => Decision {
                verdict: self.default,
                subject,
                rule: self.default_origin.clone(),
                reason: None,
                trigger: (self.default == Verdict::Ask).then_some(AskTrigger::SuspiciousCommand),
            },
        }
    }

    /// The verdict on one simple command (program and arguments).
    pub fn check_command(&self, words: &[String]) -> Decision {
        let subject = shell_words::join(words);
        let Some((program, args)) = words.split_first() else {
            return Decision {
                verdict: Verdict::Allow,
                subject,
                rule: "an empty command".into(),
                reason: None,
                trigger: None,
            };
        };
        let base = Path::new(program)
            .file_name()
            .map(|b| b.to_string_lossy().into_owned())
            .unwrap_or_else(|| program.clone());
        self.decide(subject, |m| match m {
            Matcher::Command {
                program: p,
                args: a,
            } => Some((p.is_match(program) || p.is_match(&base)) && args_match(a, args)),
            _ => None,
        })
    }

    /// The verdict on a script: the strictest over its simple commands.
    pub fn check_script(&self, script: &str) -> Decision {
        let commands = match simple_commands(script) {
            Ok(commands) => commands,
            Err(why) => {
                let mut d = self.decide(script.to_owned(), |_| None);
                if d.verdict < Verdict::Ask {
                    d.verdict = Verdict::Ask;
                    d.rule = format!("the script cannot be checked: {why}");
                    d.trigger = Some(AskTrigger::SuspiciousCommand);
                }
                return d;
            }
        };
        let mut worst: Option<Decision> = None;
        for words in commands {
            let d = self.check_command(&words);
            if worst.as_ref().is_none_or(|w| d.verdict > w.verdict) {
                worst = Some(d);
            }
        }
        worst.unwrap_or_else(|| self.check_command(&[]))
    }

    /// The verdict on reading or writing `path` (outside the workspace).
    pub fn check_path(&self, path: &Path, access: Access) -> Decision {
        let verb = match access {
            Access::Read => "read",
            Access::Write => "write",
        };
        self.decide(format!("{verb} {}", path.display()), |m| match m {
            Matcher::Path {
                glob,
                dir,
                access: a,
            } => Some(
                (glob.is_match(path) || dir.as_ref().is_some_and(|d| d.is_match(path)))
                    && a.is_none_or(|a| a == access),
            ),
            _ => None,
        })
    }

    /// The verdict on calling `tool` of MCP server `server` (subject
    /// `mcp:SERVER/TOOL`).
    pub fn check_mcp(&self, server: &str, tool: &str) -> Decision {
        let name = format!("{server}/{tool}");
        self.decide(format!("mcp:{name}"), |m| match m {
            Matcher::Mcp { tool } => Some(tool.is_match(&name)),
            _ => None,
        })
    }

    /// The verdict on network use: `host`, or any (`None`) when a step only says
    /// it needs the network.
    pub fn check_network(&self, host: Option<&str>) -> Decision {
        let subject = format!("network {}", host.unwrap_or("(any host)"));
        self.decide(subject, |m| match m {
            Matcher::Network { host: h } => Some(match host {
                Some(host) => h.is_match(host),
                // Undeclared hosts: only a rule for every host applies.
                None => h.is_match("*") || h.glob().glob() == "*",
            }),
            _ => None,
        })
    }
}

fn args_match(patterns: &[ArgPattern], args: &[String]) -> bool {
    match patterns.split_first() {
        None => args.is_empty(),
        Some((ArgPattern::Any, rest)) => {
            (0..=args.len()).any(|skip| args_match(rest, &args[skip..]))
        }
        Some((ArgPattern::One(p), rest)) => match args.split_first() {
            Some((arg, more)) => p.is_match(arg) && args_match(rest, more),
            None => false,
        },
    }
}

impl Rule {
    fn compile(spec: &PermissionRule, origin: String) -> Result<Rule, String> {
        let verdict = spec.verdict.ok_or("needs `verdict`: allow, ask or deny")?;
        let given = [
            spec.command.is_some(),
            spec.path.is_some(),
            spec.network.is_some(),
            spec.mcp.is_some(),
        ]
        .iter()
        .filter(|g| **g)
        .count();
        if given != 1 {
            return Err("needs exactly one of `command`, `path`, `network` or `mcp`".into());
        }
        if spec.access.is_some() && spec.path.is_none() {
            return Err("`access` goes with `path`".into());
        }
        let (matcher, text, trigger) = if let Some(command) = &spec.command {
            let words =
                shell_words::split(command).map_err(|e| format!("command `{command}`: {e}"))?;
            let Some((program, args)) = words.split_first() else {
                return Err("`command` is empty".into());
            };
            let mut args = args
                .iter()
                .map(|a| {
                    if a == "**" {
                        Ok(ArgPattern::Any)
                    } else {
                        glob(a, false).map(ArgPattern::One)
                    }
                })
                .collect::<Result<Vec<_>, _>>()?;
            // `**` alone is every command: any program, any arguments.
            if program == "**" && args.is_empty() {
                args.push(ArgPattern::Any);
            }
            (
                Matcher::Command {
                    program: glob(program, false)?,
                    args,
                },
                format!("{} command `{command}`", verdict.as_str()),
                AskTrigger::SuspiciousCommand,
            )
        } else if let Some(path) = &spec.path {
            let access = spec
                .access
                .map(|a| match a {
                    Access::Read => " (read)",
                    Access::Write => " (write)",
                })
                .unwrap_or("");
            (
                Matcher::Path {
                    glob: glob(path, true)?,
                    dir: match path.strip_suffix("/**") {
                        Some(dir) if !dir.is_empty() => Some(glob(dir, true)?),
                        _ => None,
                    },
                    access: spec.access,
                },
                format!("{} path `{path}`{access}", verdict.as_str()),
                AskTrigger::DestructiveAction,
            )
        } else if let Some(tool) = &spec.mcp {
            if !tool.contains('/') {
                return Err(format!(
                    "mcp `{tool}`: write SERVER/TOOL, e.g. `fs/write_file` or `fs/*`"
                ));
            }
            (
                Matcher::Mcp {
                    tool: glob(tool, true)?,
                },
                format!("{} mcp `{tool}`", verdict.as_str()),
                AskTrigger::SuspiciousCommand,
            )
        } else {
            let host = spec.network.clone().unwrap_or_default();
            (
                Matcher::Network {
                    host: glob(&host, false)?,
                },
                format!("{} network `{host}`", verdict.as_str()),
                AskTrigger::ExternalNetworkCall,
            )
        };
        Ok(Rule {
            origin,
            text,
            verdict,
            matcher,
            reason: spec.reason.clone(),
            trigger: spec.trigger.unwrap_or(trigger),
        })
    }
}

/// The simple commands of a script, each as words (leading `VAR=value`
/// assignments and `exec`/`command` dropped), including those inside `$(…)` and
/// backquotes.
pub fn simple_commands(script: &str) -> Result<Vec<Vec<String>>, String> {
    let mut segments = Vec::new();
    let mut nested = Vec::new();
    split_segments(script, &mut segments, &mut nested)?;
    let mut commands = Vec::new();
    for segment in segments {
        let words = shell_words::split(&segment).map_err(|e| format!("`{segment}`: {e}"))?;
        let words: Vec<String> = words.into_iter().skip_while(|w| is_assignment(w)).collect();
        let words = match words.first().map(String::as_str) {
            Some("exec" | "command") => words[1..].to_vec(),
            _ => words,
        };
        if !words.is_empty() {
            commands.push(words);
        }
    }
    for body in nested {
        commands.extend(simple_commands(&body)?);
    }
    Ok(commands)
}

fn is_assignment(word: &str) -> bool {
    match word.split_once('=') {
        Some((name, _)) => {
            !name.is_empty()
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !name.starts_with(|c: char| c.is_ascii_digit())
        }
        None => false,
    }
}

/// Splits at unquoted control operators; collects `$(…)` and backquote bodies.
fn split_segments(
    script: &str,
    segments: &mut Vec<String>,
    nested: &mut Vec<String>,
) -> Result<(), String> {
    let chars: Vec<char> = script.chars().collect();
    let mut current = String::new();
    let (mut single, mut double) = (false, false);
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if single {
            current.push(c);
            single = c != '\'';
            i += 1;
            continue;
        }
        match c {
            '\\' => {
                current.push(c);
                if let Some(&next) = chars.get(i + 1) {
                    current.push(next);
                }
                i += 2;
                continue;
            }
            '\'' if !double => single = true,
            '"' => double = !double,
            '$' if chars.get(i + 1) == Some(&'(') => {
                let end = closing(&chars, i + 2)?;
                nested.push(chars[i + 2..end].iter().collect());
                // The substitution stands for one word here.
                current.push_str("SUBST");
                i = end + 1;
                continue;
            }
            '`' => {
                let end = chars[i + 1..]
                    .iter()
                    .position(|&c| c == '`')
                    .map(|p| p + i + 1)
                    .ok_or("an unclosed backquote")?;
                nested.push(chars[i + 1..end].iter().collect());
                current.push_str("SUBST");
                i = end + 1;
                continue;
            }
            // `>&2`, `2>&1`, `<&3` and `&>file` redirect; they separate nothing.
            '&' if !double
                && (current.ends_with('>')
                    || current.ends_with('<')
                    || chars.get(i + 1) == Some(&'>')) => {}
            ';' | '&' | '|' | '\n' if !double => {
                segments.push(std::mem::take(&mut current));
                i += 1;
                continue;
            }
            _ => {}
        }
        current.push(c);
        i += 1;
    }
    if single || double {
        return Err("an unclosed quote".into());
    }
    segments.push(current);
    segments.retain(|s| !s.trim().is_empty());
    Ok(())
}

/// The index of the `)` that closes a `$(` whose body starts at `start`.
fn closing(chars: &[char], start: usize) -> Result<usize, String> {
    let mut depth = 1;
    let (mut single, mut double) = (false, false);
    let mut i = start;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '\\' if !single => i += 1,
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            '(' if !single && !double => depth += 1,
            ')' if !single && !double => {
                depth -= 1;
                if depth == 0 {
                    return Ok(i);
                }
            }
            _ => {}
        }
        i += 1;
    }
    Err("an unclosed `$(`".into())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn policy(text: &str) -> Policy {
        Policy::parse(text, "policy.toml").unwrap()
    }

    fn words(s: &str) -> Vec<String> {
        shell_words::split(s).unwrap()
    }

    const RULES: &str = r#"
        [[rules]]
        verdict = "allow"
        command = "rm **"
        [[rules]]
        verdict = "deny"
        command = "rm -rf /*"
        reason = "never wipe the root"
        [[rules]]
        verdict = "ask"
        command = "git push **"
        trigger = "destructive_action"
        [[rules]]
        verdict = "allow"
        command = "git **"
    "#;

    #[test]
    fn deny_wins_over_allow_whatever_the_order() {
        let p = policy(RULES);
        let d = p.check_command(&words("rm -rf /usr"));
        assert_eq!(d.verdict, Verdict::Deny);
        assert_eq!(d.rule, "rule 2 of policy.toml: deny command `rm -rf /*`");
        assert_eq!(d.reason.as_deref(), Some("never wipe the root"));
        assert_eq!(
            p.check_command(&words("rm -rf build")).verdict,
            Verdict::Allow
        );
        // A path is a word: `/*` matches `/usr`, and with `**` more words too.
        assert_eq!(
            p.check_command(&words("/bin/rm -rf /etc")).verdict,
            Verdict::Deny
        );
    }

    #[test]
    fn ask_beats_allow_and_carries_its_trigger() {
        let p = policy(RULES);
        let d = p.check_command(&words("git push origin main"));
        assert_eq!(d.verdict, Verdict::Ask);
        assert_eq!(d.trigger, Some(AskTrigger::DestructiveAction));
        assert_eq!(
            p.check_command(&words("git status")).verdict,
            Verdict::Allow
        );
    }

    #[test]
    fn double_star_alone_is_every_command() {
        let p = policy("[[rules]]\nverdict = 'deny'\ncommand = '**'\n");
        for command in ["rm -f old.txt", "ls", "/usr/bin/env python3 -c 1"] {
            assert_eq!(
                p.check_command(&words(command)).verdict,
                Verdict::Deny,
                "{command}"
            );
        }
        assert_eq!(p.check_script("echo a | wc -c").verdict, Verdict::Deny);
    }

    #[test]
    fn arguments_match_word_by_word() {
        let p = policy("[[rules]]\nverdict = 'deny'\ncommand = 'curl -X DELETE *'\n");
        assert_eq!(
            p.check_command(&words("curl -X DELETE http://x")).verdict,
            Verdict::Deny
        );
        assert_eq!(
            p.check_command(&words("curl -X GET http://x")).verdict,
            Verdict::Allow
        );
        assert_eq!(
            p.check_command(&words("curl -X DELETE http://x extra"))
                .verdict,
            Verdict::Allow,
            "without `**` the arguments must all be matched"
        );
    }

    #[test]
    fn the_default_decides_what_no_rule_matches() {
        let p = policy("default = 'ask'\n[[rules]]\nverdict = 'allow'\ncommand = 'ls **'\n");
        assert_eq!(p.check_command(&words("ls -la")).verdict, Verdict::Allow);
        let d = p.check_command(&words("make"));
        assert_eq!(d.verdict, Verdict::Ask);
        assert!(d.rule.contains("default"), "{}", d.rule);
        assert_eq!(
            Policy::default().check_script("anything").verdict,
            Verdict::Allow
        );
    }

    #[test]
    fn a_script_gets_the_strictest_verdict_of_its_commands() {
        let p = policy(RULES);
        let d = p.check_script("cd build && make; rm -rf /opt || echo done");
        assert_eq!(d.verdict, Verdict::Deny);
        assert_eq!(d.subject, "rm -rf /opt");
        // Inside quotes an operator is text, not a separator.
        assert_eq!(
            p.check_script("echo 'a; rm -rf /opt'").verdict,
            Verdict::Allow
        );
        // Substitutions and assignments do not hide a command.
        assert_eq!(
            p.check_script("X=$(rm -rf /var) echo hi").verdict,
            Verdict::Deny
        );
        assert_eq!(p.check_script("echo `git push`").verdict, Verdict::Ask);
        assert_eq!(
            p.check_script("FOO=1 exec rm -rf /srv").verdict,
            Verdict::Deny
        );
        // Redirections with `&` are not separators.
        let strict = policy("default = 'ask'\n[[rules]]\nverdict = 'allow'\ncommand = 'echo **'\n");
        for script in [
            "echo hi >&2",
            "echo hi 2>&1",
            "echo hi &>log",
            "echo hi <&0",
        ] {
            assert_eq!(
                strict.check_script(script).verdict,
                Verdict::Allow,
                "{script}"
            );
        }
        assert_eq!(strict.check_script("echo a & make").verdict, Verdict::Ask);
        // A script that cannot be split is asked about, naming why.
        let d = p.check_script("echo 'unclosed");
        assert_eq!(d.verdict, Verdict::Ask);
        assert!(d.rule.contains("unclosed quote"), "{}", d.rule);
    }

    #[test]
    fn path_rules_match_globs_per_access() {
        let p = policy(
            "[[rules]]\nverdict = 'allow'\npath = '/data/**'\naccess = 'read'\n\
             [[rules]]\nverdict = 'deny'\npath = '/data/secret/*'\n",
        );
        assert_eq!(
            p.check_path(Path::new("/data/a/b.csv"), Access::Read)
                .verdict,
            Verdict::Allow
        );
        assert_eq!(
            p.check_path(Path::new("/data/a/b.csv"), Access::Write)
                .verdict,
            Verdict::Allow,
            "no rule for writing: the default"
        );
        assert_eq!(
            p.check_path(Path::new("/data/secret/k"), Access::Read)
                .verdict,
            Verdict::Deny
        );
        // `*` stays within one directory.
        assert_eq!(
            p.check_path(Path::new("/data/secret/x/k"), Access::Read)
                .verdict,
            Verdict::Allow
        );
    }

    #[test]
    fn a_rule_on_everything_below_a_directory_covers_the_directory_a_step_declares() {
        let p = policy("[[rules]]\nverdict = 'deny'\npath = '/srv/data/**'\n");
        for (path, verdict) in [
            ("/srv/data", Verdict::Deny),
            ("/srv/data/a/b", Verdict::Deny),
            ("/srv/database", Verdict::Allow),
            ("/srv", Verdict::Allow),
        ] {
            assert_eq!(
                p.check_path(Path::new(path), Access::Read).verdict,
                verdict,
                "{path}"
            );
        }
    }

    #[test]
    fn network_rules_match_hosts() {
        let p = policy(
            "[[rules]]\nverdict = 'ask'\nnetwork = '*'\n\
             [[rules]]\nverdict = 'allow'\nnetwork = '*.example.org'\n\
             [[rules]]\nverdict = 'deny'\nnetwork = 'evil.example.org'\n",
        );
        let d = p.check_network(None);
        assert_eq!(d.verdict, Verdict::Ask);
        assert_eq!(d.trigger, Some(AskTrigger::ExternalNetworkCall));
        assert_eq!(
            p.check_network(Some("evil.example.org")).verdict,
            Verdict::Deny
        );
        assert_eq!(
            p.check_network(Some("api.example.org")).verdict,
            Verdict::Ask,
            "the rule for every host matches too, and ask is stricter"
        );
    }

    #[test]
    fn mcp_rules_match_one_tool_or_a_server() {
        let p = policy(
            "[[rules]]\nverdict = 'allow'\nmcp = 'fs/*'\n\
             [[rules]]\nverdict = 'deny'\nmcp = 'fs/write_file'\nreason = 'read only'\n\
             [[rules]]\nverdict = 'ask'\nmcp = '*/delete*'\n",
        );
        let d = p.check_mcp("fs", "write_file");
        assert_eq!(d.verdict, Verdict::Deny);
        assert_eq!(d.subject, "mcp:fs/write_file");
        assert!(d.rule.contains("rule 2 of policy.toml"), "{}", d.rule);
        assert_eq!(d.reason.as_deref(), Some("read only"));
        assert_eq!(p.check_mcp("fs", "read_text_file").verdict, Verdict::Allow);
        assert_eq!(p.check_mcp("db", "delete_row").verdict, Verdict::Ask);
        // No rule matches: the default.
        assert_eq!(p.check_mcp("db", "select").verdict, Verdict::Allow);
        assert!(p.check_mcp("db", "select").rule.contains("no rule"));
        assert!(
            Policy::parse(
                "[[rules]]\nverdict = 'deny'\nmcp = 'write_file'\n",
                "p.toml"
            )
            .unwrap_err()
            .to_string()
            .contains("write SERVER/TOOL")
        );
    }

    #[test]
    fn bad_rules_are_refused_naming_the_rule() {
        for (text, says) in [
            (
                "[[rules]]\ncommand = 'ls'\n",
                "rule 1 of policy.toml: needs `verdict`",
            ),
            ("[[rules]]\nverdict = 'allow'\n", "exactly one of"),
            (
                "[[rules]]\nverdict = 'allow'\ncommand = 'ls'\npath = '/x'\n",
                "exactly one of",
            ),
            ("[[rules]]\nverdict = 'maybe'\ncommand = 'ls'\n", "maybe"),
            (
                "[[rules]]\nverdict = 'deny'\ncommand = 'ls'\nfoo = 1\n",
                "foo",
            ),
            (
                "[[rules]]\nverdict = 'deny'\ncommand = 'ls [a'\n",
                "not a valid pattern",
            ),
            (
                "[[rules]]\nverdict = 'deny'\ncommand = 'ls'\naccess = 'read'\n",
                "`access` goes with `path`",
            ),
        ] {
            let err = Policy::parse(text, "policy.toml").unwrap_err().to_string();
            assert!(err.contains(says), "{text}: {err}");
        }
    }
}
