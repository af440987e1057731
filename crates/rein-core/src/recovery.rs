//! Error recovery (spec `tasks.md` §3): every failure that reaches the engine is
//! classified into exactly one [`ErrorType`] by [`classify`], and handled by the
//! strategy its type has — the step's override, else the plan's, else the default.

use std::time::Duration;

use rein_protocol::{ErrorType, RecoveryAction, RecoveryPolicy, RecoveryStrategy};

/// What went wrong, as the part that noticed it reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// A command exited with a non-zero status.
    Exit { code: i32 },
    /// A command was killed by a signal.
    Signal { signal: i32 },
    /// A step ran past its timeout.
    Timeout,
    /// An HTTP call failed with this status (`retry_after` from its Retry-After).
    Http {
        status: u16,
        retry_after: Option<Duration>,
    },
    /// A connection was reset, refused or dropped.
    Connection,
    /// The sandbox refused an operation; `security` when it looked like an attack
    /// (an escape attempt) rather than a missing permission.
    SandboxDenied { security: bool },
    /// A permission rule or the OS said no.
    PermissionDenied,
    /// The input or the result is invalid.
    Validation,
    /// rein cannot do this at all (a missing program, an unsupported request).
    Unsupported,
    /// Something broke inside rein or the executor.
    Internal,
}

// Exit statuses with a meaning (sysexits.h and the shell's own).
const EX_USAGE: i32 = 64;
const EX_DATAERR: i32 = 65;
const EX_UNAVAILABLE: i32 = 69;
const EX_TEMPFAIL: i32 = 75;
const EX_NOPERM: i32 = 77;
const SHELL_CANNOT_EXECUTE: i32 = 126;
const SHELL_NOT_FOUND: i32 = 127;

/// The one classification of failures. Exhaustive: a new kind of failure does not
/// compile until it is classified.
pub fn classify(failure: &Failure) -> ErrorType {
    match failure {
        Failure::Exit { code } => match *code {
            EX_TEMPFAIL => ErrorType::Transient,
            EX_UNAVAILABLE => ErrorType::ResourceBusy,
            EX_NOPERM | SHELL_CANNOT_EXECUTE => ErrorType::PermissionDenied,
            EX_USAGE | EX_DATAERR => ErrorType::ValidationError,
            SHELL_NOT_FOUND => ErrorType::Unsupported,
            // Any other status is the command's own verdict: it failed.
            _other => ErrorType::Fatal,
        },
        Failure::Signal { signal } => match *signal {
            // Stopped from outside (hang-up, interrupt, terminate): try again.
            1 | 2 | 15 => ErrorType::Transient,
            // Killed outright: usually the OOM killer or a resource limit.
            9 | 24 | 25 => ErrorType::ResourceBusy,
            // A bad system call: a sandbox's seccomp filter stopped it.
            31 => ErrorType::SecurityViolation,
            // A crash (segfault, abort, bus error, …).
            _other => ErrorType::Fatal,
        },
        Failure::Timeout | Failure::Connection => ErrorType::Transient,
        Failure::Http { status, .. } => match *status {
            429 => ErrorType::RateLimit,
            408 | 425 => ErrorType::Transient,
            401 | 403 | 407 => ErrorType::PermissionDenied,
            501 | 505 => ErrorType::Unsupported,
            500..=599 => ErrorType::Transient,
            400..=499 => ErrorType::ValidationError,
            // An HTTP "failure" that is not an error status makes no sense: fatal.
            _other => ErrorType::Fatal,
        },
        Failure::SandboxDenied { security: true } => ErrorType::SecurityViolation,
        Failure::SandboxDenied { security: false } | Failure::PermissionDenied => {
            ErrorType::PermissionDenied
        }
        Failure::Validation => ErrorType::ValidationError,
        Failure::Unsupported => ErrorType::Unsupported,
        Failure::Internal => ErrorType::Fatal,
    }
}

/// How long a wait for the error's own time (Retry-After) should be, if it names one.
pub fn retry_after(failure: &Failure) -> Option<Duration> {
    match failure {
        Failure::Http { retry_after, .. } => *retry_after,
        Failure::Exit { .. }
        | Failure::Signal { .. }
        | Failure::Timeout
        | Failure::Connection
        | Failure::SandboxDenied { .. }
        | Failure::PermissionDenied
        | Failure::Validation
        | Failure::Unsupported
        | Failure::Internal => None,
    }
}

/// The defaults of spec §3 rule 9.
pub fn default_strategy(error: ErrorType) -> RecoveryStrategy {
    use RecoveryAction as A;
    let strategy = RecoveryStrategy::action;
    match error {
        ErrorType::Transient => RecoveryStrategy {
            max_retries: Some(3),
            retry_delay_ms: Some(5_000),
            ..strategy(A::Retry)
        },
        ErrorType::RateLimit => RecoveryStrategy {
            max_retries: Some(10),
            retry_delay_ms: Some(30_000),
            ..strategy(A::Wait)
        },
        ErrorType::ResourceBusy => RecoveryStrategy {
            max_retries: Some(10),
            retry_delay_ms: Some(30_000),
            ..strategy(A::Wait)
        },
        ErrorType::PermissionDenied => strategy(A::Escalate),
        ErrorType::ValidationError => strategy(A::Pause),
        ErrorType::SecurityViolation | ErrorType::Fatal | ErrorType::Unsupported => {
            strategy(A::Abort)
        }
    }
}

/// The strategy for an error: the step's, else the plan's, else the default; unset
/// counts and delays come from the default for retry and wait.
pub fn resolve(error: ErrorType, step: &RecoveryPolicy, plan: &RecoveryPolicy) -> RecoveryStrategy {
    let chosen = step.get(&error).or_else(|| plan.get(&error)).copied();
    let Some(mut chosen) = chosen else {
        return default_strategy(error);
    };
    let base = match chosen.action {
        RecoveryAction::Retry => default_strategy(ErrorType::Transient),
        RecoveryAction::Wait => default_strategy(ErrorType::RateLimit),
        RecoveryAction::Skip
        | RecoveryAction::Pause
        | RecoveryAction::Abort
        | RecoveryAction::Escalate => chosen,
    };
    chosen.max_retries = chosen.max_retries.or(base.max_retries);
    chosen.retry_delay_ms = chosen.retry_delay_ms.or(base.retry_delay_ms);
    chosen
}

/// The longest a single backoff grows to.
pub const MAX_BACKOFF: Duration = Duration::from_secs(15 * 60);

/// The delay before retry number `retry` (1 for the first): `base · 2^(retry−1)`,
/// capped, times a jitter factor in [0.8, 1.2) drawn from `unit` ∈ [0, 1).
pub fn backoff(base: Duration, retry: u32, unit: f64) -> Duration {
    let exp = base.saturating_mul(1u32 << retry.saturating_sub(1).min(20));
    let capped = exp.min(MAX_BACKOFF);
    capped.mul_f64(0.8 + 0.4 * unit.clamp(0.0, 1.0))
}

#[cfg(test)]
#[path = "recovery_tests.rs"]
mod tests;
