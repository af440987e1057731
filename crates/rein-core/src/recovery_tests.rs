use std::collections::BTreeMap;

use super::*;

fn http(status: u16) -> Failure {
    Failure::Http {
        status,
        retry_after: None,
    }
}

#[test]
fn exit_statuses_are_classified_case_by_case() {
    let cases = [
        (1, ErrorType::Fatal),
        (2, ErrorType::Fatal),
        (64, ErrorType::ValidationError),
        (65, ErrorType::ValidationError),
        (69, ErrorType::ResourceBusy),
        (75, ErrorType::Transient),
        (77, ErrorType::PermissionDenied),
        (126, ErrorType::PermissionDenied),
        (127, ErrorType::Unsupported),
        (255, ErrorType::Fatal),
    ];
    for (code, expected) in cases {
        assert_eq!(classify(&Failure::Exit { code }), expected, "exit {code}");
    }
}

#[test]
fn signals_are_classified_case_by_case() {
    let cases = [
        (1, ErrorType::Transient),
        (2, ErrorType::Transient),
        (15, ErrorType::Transient),
        (9, ErrorType::ResourceBusy),
        (24, ErrorType::ResourceBusy),
        (25, ErrorType::ResourceBusy),
        (31, ErrorType::SecurityViolation),
        (6, ErrorType::Fatal),
        (11, ErrorType::Fatal),
    ];
    for (signal, expected) in cases {
        assert_eq!(
            classify(&Failure::Signal { signal }),
            expected,
            "signal {signal}"
        );
    }
}

#[test]
fn http_statuses_are_classified_case_by_case() {
    let with_after = Failure::Http {
        status: 429,
        retry_after: Some(Duration::from_secs(7)),
    };
    assert_eq!(classify(&with_after), ErrorType::RateLimit);
    assert_eq!(retry_after(&with_after), Some(Duration::from_secs(7)));
    assert_eq!(classify(&http(429)), ErrorType::RateLimit);
    assert_eq!(retry_after(&http(429)), None);
    let cases = [
        (500, ErrorType::Transient),
        (502, ErrorType::Transient),
        (503, ErrorType::Transient),
        (504, ErrorType::Transient),
        (408, ErrorType::Transient),
        (501, ErrorType::Unsupported),
        (401, ErrorType::PermissionDenied),
        (403, ErrorType::PermissionDenied),
        (400, ErrorType::ValidationError),
        (404, ErrorType::ValidationError),
        (422, ErrorType::ValidationError),
        (302, ErrorType::Fatal),
    ];
    for (status, expected) in cases {
        assert_eq!(classify(&http(status)), expected, "HTTP {status}");
    }
}

#[test]
fn other_failures_are_classified_case_by_case() {
    assert_eq!(classify(&Failure::Timeout), ErrorType::Transient);
    assert_eq!(classify(&Failure::Connection), ErrorType::Transient);
    assert_eq!(
        classify(&Failure::SandboxDenied { security: false }),
        ErrorType::PermissionDenied
    );
    assert_eq!(
        classify(&Failure::SandboxDenied { security: true }),
        ErrorType::SecurityViolation
    );
    assert_eq!(
        classify(&Failure::PermissionDenied),
        ErrorType::PermissionDenied
    );
    assert_eq!(classify(&Failure::Validation), ErrorType::ValidationError);
    assert_eq!(classify(&Failure::Unsupported), ErrorType::Unsupported);
    assert_eq!(classify(&Failure::Internal), ErrorType::Fatal);
}

#[test]
fn the_defaults_are_the_specs() {
    use RecoveryAction as A;
    let expect = [
        (ErrorType::Transient, A::Retry, Some(3), Some(5_000)),
        (ErrorType::RateLimit, A::Wait, Some(10), Some(30_000)),
        (ErrorType::ResourceBusy, A::Wait, Some(10), Some(30_000)),
        (ErrorType::PermissionDenied, A::Escalate, None, None),
        (ErrorType::ValidationError, A::Pause, None, None),
        (ErrorType::SecurityViolation, A::Abort, None, None),
        (ErrorType::Fatal, A::Abort, None, None),
        (ErrorType::Unsupported, A::Abort, None, None),
    ];
    for (error, action, retries, delay) in expect {
        let s = default_strategy(error);
        assert_eq!(
            (s.action, s.max_retries, s.retry_delay_ms),
            (action, retries, delay),
            "{error}"
        );
    }
}

#[test]
fn a_step_override_beats_the_plans_which_beats_the_default() {
    let mut plan = BTreeMap::new();
    plan.insert(
        ErrorType::Fatal,
        RecoveryStrategy::action(RecoveryAction::Skip),
    );
    plan.insert(
        ErrorType::Transient,
        RecoveryStrategy {
            max_retries: Some(7),
            ..RecoveryStrategy::action(RecoveryAction::Retry)
        },
    );
    let mut step = BTreeMap::new();
    step.insert(
        ErrorType::Fatal,
        RecoveryStrategy::action(RecoveryAction::Retry),
    );
    let fatal = resolve(ErrorType::Fatal, &step, &plan);
    assert_eq!(fatal.action, RecoveryAction::Retry);
    assert_eq!(
        (fatal.max_retries, fatal.retry_delay_ms),
        (Some(3), Some(5_000)),
        "retry's defaults fill in"
    );
    assert_eq!(
        resolve(ErrorType::Fatal, &BTreeMap::new(), &plan).action,
        RecoveryAction::Skip
    );
    assert_eq!(
        resolve(ErrorType::Transient, &step, &plan).max_retries,
        Some(7)
    );
    assert_eq!(
        resolve(ErrorType::Unsupported, &step, &plan).action,
        RecoveryAction::Abort
    );
}

#[test]
fn backoff_doubles_with_jitter_and_is_capped() {
    let base = Duration::from_secs(5);
    assert_eq!(backoff(base, 1, 0.5), Duration::from_secs(5));
    assert_eq!(backoff(base, 2, 0.5), Duration::from_secs(10));
    assert_eq!(backoff(base, 3, 0.5), Duration::from_secs(20));
    assert_eq!(backoff(base, 1, 0.0), Duration::from_secs(4));
    assert!(backoff(base, 1, 0.999) < Duration::from_secs(6));
    assert_eq!(backoff(base, 30, 0.5), MAX_BACKOFF);
}
