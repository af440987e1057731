//! Every machine walked over every (state, event) pair, against what the
//! spec says written out a second time as a `match`: a row added to a table,
//! or one missing, fails here.

use super::*;

/// Walks every pair of `M`: legal ones must land where `expect` says, the
/// others must be refused naming the state, the event and what the state
/// allows. Answers how many pairs were legal.
fn walk<M: Machine>(expect: impl Fn(M::State, M::Event) -> Option<M::State>) -> usize {
    let mut legal = 0;
    for &from in M::STATES {
        for &event in M::EVENTS {
            match (M::next(from, event), expect(from, event)) {
                (Ok(got), Some(to)) => {
                    legal += 1;
                    assert_eq!(got, to, "{} {from:?} + {event:?}", M::KIND);
                }
                (Err(e), None) => {
                    assert_eq!(e.kind, M::KIND);
                    assert_eq!(e.from, M::state_name(from));
                    assert_eq!(e.event, M::event_name(event));
                    let allowed: Vec<&str> =
                        M::allowed(from).into_iter().map(M::event_name).collect();
                    assert_eq!(e.allowed, allowed);
                    let text = e.to_string();
                    assert!(text.starts_with("illegal transition: "), "{text}");
                    assert!(text.contains(M::event_name(event)), "{text}");
                }
                (got, want) => panic!("{} {from:?} + {event:?}: {got:?}, want {want:?}", M::KIND),
            }
        }
    }
    // The table holds each pair once, and only states and events of the machine.
    for (i, (f, e, t)) in M::TABLE.iter().enumerate() {
        assert!(M::STATES.contains(f) && M::STATES.contains(t) && M::EVENTS.contains(e));
        assert!(
            !M::TABLE[..i].iter().any(|(f2, e2, _)| f2 == f && e2 == e),
            "{} {f:?} + {e:?} twice",
            M::KIND
        );
    }
    assert_eq!(legal, M::TABLE.len(), "{}", M::KIND);
    legal
}

#[test]
fn every_task_transition_is_as_specified() {
    use TaskEvent::*;
    walk::<Tasks>(|from, ev| match (from, ev) {
        (T::Pending, Start) => Some(T::InProgress),
        (T::Pending, Pause) => Some(T::Paused),
        (T::Pending, Cancel) => Some(T::Cancelled),
        (T::InProgress, Resume) => Some(T::InProgress),
        (T::InProgress, Pause) => Some(T::Paused),
        (T::InProgress, Complete) => Some(T::Completed),
        (T::InProgress, Fail) => Some(T::Failed),
        (T::InProgress, Cancel) => Some(T::Cancelled),
        (T::Paused, Resume) => Some(T::InProgress),
        (T::Paused, Cancel) => Some(T::Cancelled),
        _ => None,
    });
    for from in [T::Completed, T::Failed, T::Cancelled] {
        assert!(Tasks::is_final(from), "{from:?}");
    }
}

#[test]
fn every_checkpoint_transition_is_as_specified() {
    use CheckpointEvent::*;
    walk::<Checkpoints>(|from, ev| match (from, ev) {
        (C::Pending, Enter) => Some(C::InProgress),
        (C::Pending, Skip) => Some(C::Skipped),
        (C::InProgress, Pass) => Some(C::Completed),
        (C::InProgress, CheckpointEvent::Fail) => Some(C::Failed),
        (C::InProgress, Skip) => Some(C::Skipped),
        _ => None,
    });
    // Never backwards.
    for from in [C::Completed, C::Failed, C::Skipped] {
        assert!(Checkpoints::is_final(from), "{from:?}");
    }
}

#[test]
fn every_step_transition_is_as_specified() {
    use StepEvent::*;
    walk::<Steps>(|from, ev| match (from, ev) {
        (S::NotStarted, Start) => Some(S::Running),
        (S::NotStarted, Ask) => Some(S::Awaiting),
        (S::NotStarted, Block) => Some(S::DependencyFailed),
        (S::Running, End) => Some(S::Ended),
        (S::Running, StepEvent::Fail) => Some(S::Failed),
        (S::Ended, Pass) => Some(S::Completed),
        (S::Ended, Skip) => Some(S::Skipped),
        (S::Ended, StepEvent::Fail) => Some(S::Failed),
        (S::Ended, Delay) => Some(S::Delayed),
        (S::Ended, RunAgain) => Some(S::NotStarted),
        (S::Ended, Ask) => Some(S::Awaiting),
        (S::Awaiting, Reask) => Some(S::Awaiting),
        (S::Awaiting, Pass) => Some(S::Completed),
        (S::Awaiting, Skip) => Some(S::Skipped),
        (S::Awaiting, StepEvent::Fail) => Some(S::Failed),
        (S::Awaiting, RunAgain) => Some(S::NotStarted),
        (S::Delayed, RunAgain) => Some(S::NotStarted),
        (S::Interrupted, RunAgain) => Some(S::NotStarted),
        (S::Interrupted, Skip) => Some(S::Skipped),
        (S::Interrupted, Ask) => Some(S::Awaiting),
        _ => None,
    });
    for s in [S::Completed, S::Skipped, S::Failed, S::DependencyFailed] {
        assert!(Steps::is_final(s), "{s:?}");
    }
    // Only a step that has not started can be blocked by a failed dependency,
    // and nothing starts but a step that has not started.
    for s in StepState::ALL {
        assert_eq!(Steps::next(s, Block).is_ok(), s == S::NotStarted);
        assert_eq!(Steps::next(s, Start).is_ok(), s == S::NotStarted);
    }
}

#[test]
fn every_approval_transition_is_as_specified() {
    use ApprovalEvent::*;
    walk::<Approvals>(|from, ev| match (from, ev) {
        (A::Pending, Approve) => Some(A::Approved),
        (A::Pending, Deny) => Some(A::Denied),
        (A::Pending, ApprovalEvent::Skip) => Some(A::Skipped),
        (A::Pending, Delegate) => Some(A::Pending),
        (A::Pending, Expire) => Some(A::Expired),
        (A::Pending, Revoke) => Some(A::Denied),
        _ => None,
    });
    // The first decision wins: every settled status is final.
    for s in ApprovalStatus::ALL {
        assert_eq!(Approvals::is_final(s), s != A::Pending, "{s:?}");
    }
    // A decision is the event of its name.
    for d in [
        rein_protocol::Decision::Approve,
        rein_protocol::Decision::Deny,
        rein_protocol::Decision::Skip,
        rein_protocol::Decision::Delegate,
    ] {
        assert_eq!(
            Approvals::next(A::Pending, ApprovalEvent::of(d)),
            Ok(d.status())
        );
    }
}

#[test]
fn every_contract_transition_is_as_specified() {
    use ContractEvent::*;
    walk::<Contracts>(|from, ev| match (from, ev) {
        (K::Draft, Propose) => Some(K::Proposed),
        (K::Draft, Cancel) => Some(K::Cancelled),
        (K::Proposed, ContractEvent::Approve) => Some(K::Approved),
        (K::Proposed, Reject) => Some(K::Rejected),
        (K::Proposed, Cancel) => Some(K::Cancelled),
        (K::Approved, Execute) => Some(K::Executing),
        (K::Approved, Cancel) => Some(K::Cancelled),
        (K::Executing, Verify) => Some(K::Verified),
        (K::Executing, ContractEvent::Fail) => Some(K::Failed),
        (K::Executing, RollBack) => Some(K::RolledBack),
        (K::Executing, Cancel) => Some(K::Cancelled),
        (K::Failed, RollBack) => Some(K::RolledBack),
        _ => None,
    });
    // Moved by target status: each event leads to the status of its name,
    // and nothing leads back to draft.
    for from in ContractStatus::ALL {
        assert!(contract_transition(from, K::Draft).is_err());
        for to in ContractStatus::ALL {
            if let Ok(got) = contract_transition(from, to) {
                assert_eq!(got, to);
            }
        }
    }
    for s in [K::Verified, K::Rejected, K::RolledBack, K::Cancelled] {
        assert!(Contracts::is_final(s), "{s:?}");
    }
    assert!(
        !Contracts::is_final(K::Failed),
        "failed may still be rolled back"
    );
    let e = contract_transition(K::Verified, K::Executing)
        .unwrap_err()
        .of("hctr_1");
    assert_eq!(
        e.to_string(),
        "illegal transition: harness contract hctr_1 is verified, which cannot move to executing; it can do nothing (it is final)"
    );
    let e = contract_transition(K::Proposed, K::Verified).unwrap_err();
    assert!(
        e.to_string().ends_with(
            "which cannot move to verified; it can move to approved, rejected, cancelled"
        ),
        "{e}"
    );
    let e = Steps::next(S::NotStarted, StepEvent::Pass).unwrap_err();
    assert!(e.to_string().ends_with("it can start, ask, block"), "{e}");
}
