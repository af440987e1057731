//! The OpenClaw.NET seed's payloads (seed 000) sent verbatim to a running
//! `rein serve` and through the CLI: a contract, an evidence bundle and a
//! shared state with every field the seed defines set come back with every
//! field kept under the seed's name; a field rein does not know is a 400
//! naming it; the seed's list filters answer.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::{Path, PathBuf};

use common::{Server, http, json, rein, run_ok, start};
use serde_json::Value;

const TOKEN: &str = common::OPERATOR_TOKEN;

fn payload(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../rein-protocol/tests/data/{name}"))
}

fn read(name: &str) -> String {
    std::fs::read_to_string(payload(name)).unwrap()
}

fn call(addr: &str, method: &str, path: &str, body: Option<&str>) -> (u16, Value) {
    let (status, text) = http(
        addr,
        method,
        path,
        Some(TOKEN),
        body.map(|b| ("application/json", b)),
    );
    let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, v)
}

/// Every field of `given` is in `got` with the same value; times compare as
/// instants (`+00:00` and `Z` alike); `updatedAtUtc` is rein's to set.
fn contains(got: &Value, given: &Value, at: &str) {
    match (got, given) {
        (Value::Object(g), Value::Object(w)) => {
            for (k, v) in w.iter().filter(|(k, _)| *k != "updatedAtUtc") {
                let there = g
                    .get(k)
                    .unwrap_or_else(|| panic!("{at}.{k} was dropped: {got}"));
                contains(there, v, &format!("{at}.{k}"));
            }
        }
        (Value::Array(g), Value::Array(w)) => {
            assert_eq!(g.len(), w.len(), "{at}: length");
            for (i, (a, b)) in g.iter().zip(w).enumerate() {
                contains(a, b, &format!("{at}[{i}]"));
            }
        }
        (Value::String(g), Value::String(w)) if g != w => {
            let instant = |t: &str| {
                chrono::DateTime::parse_from_rfc3339(t)
                    .ok()
                    .map(|t| t.to_utc())
            };
            assert!(
                instant(g).is_some() && instant(g) == instant(w),
                "{at}: {g} is not {w}"
            );
        }
        _ => assert_eq!(got, given, "{at}"),
    }
}

fn serve(dir: &Path) -> (Server, String) {
    start(&dir.join("data"), TOKEN)
}

#[test]
fn the_seed_payloads_round_trip_through_the_api_with_every_field() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, addr) = serve(dir.path());
    for (name, route, envelope, id) in [
        (
            "seed-000-contract-full.json",
            "/admin/harness/contracts",
            "contract",
            "hctr_seed_full",
        ),
        (
            "seed-000-evidence-full.json",
            "/admin/harness/evidence",
            "evidence",
            "evb_seed_full",
        ),
        (
            "seed-000-state-full.json",
            "/admin/harness/shared-state",
            "state",
            "shs_seed_full",
        ),
    ] {
        let text = read(name);
        let given: Value = serde_json::from_str(&text).unwrap();
        let (status, created) = call(&addr, "POST", route, Some(&text));
        assert_eq!(status, 201, "{name}: {created}");
        contains(&created[envelope], &given, name);
        let (status, shown) = call(&addr, "GET", &format!("{route}/{id}"), None);
        assert_eq!(status, 200, "{name}: {shown}");
        contains(&shown[envelope], &given, name);
    }
    // The contract's risk is the one given, not re-derived.
    let (_, c) = call(
        &addr,
        "GET",
        "/admin/harness/contracts/hctr_seed_full",
        None,
    );
    assert_eq!(c["contract"]["riskLevel"], "critical");
    assert_eq!(c["contract"]["riskDerived"], false);
    assert!(c["contract"].get("approvedAtUtc").is_none());
    // Approval and an end set their times.
    for to in ["approved", "executing", "verified"] {
        let (status, moved) = call(
            &addr,
            "POST",
            "/admin/harness/contracts/hctr_seed_full/status",
            Some(&format!(r#"{{"status": "{to}"}}"#)),
        );
        assert_eq!(status, 200, "{moved}");
    }
    let (_, c) = call(
        &addr,
        "GET",
        "/admin/harness/contracts/hctr_seed_full",
        None,
    );
    assert!(c["contract"]["approvedAtUtc"].is_string(), "{c}");
    assert!(c["contract"]["completedAtUtc"].is_string(), "{c}");
}

#[test]
fn a_field_rein_does_not_know_is_refused_naming_it_at_any_depth() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, addr) = serve(dir.path());
    let mut contract: Value = serde_json::from_str(&read("seed-000-contract-full.json")).unwrap();
    contract["plannedActions"][0]["blastRadius"] = Value::from("large");
    let (status, body) = call(
        &addr,
        "POST",
        "/admin/harness/contracts",
        Some(&contract.to_string()),
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("blastRadius"), "{body}");
    let mut evidence: Value = serde_json::from_str(&read("seed-000-evidence-full.json")).unwrap();
    evidence["checks"][0]["flakiness"] = Value::from(0.1);
    let (status, body) = call(
        &addr,
        "POST",
        "/admin/harness/evidence",
        Some(&evidence.to_string()),
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("flakiness"), "{body}");
    let mut state: Value = serde_json::from_str(&read("seed-000-state-full.json")).unwrap();
    state["sharedWriteSet"][0]["owner"] = Value::from("ana");
    let (status, body) = call(
        &addr,
        "POST",
        "/admin/harness/shared-state",
        Some(&state.to_string()),
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("owner"), "{body}");
    // Nothing was created by the refused requests.
    let (_, list) = call(&addr, "GET", "/admin/harness/contracts", None);
    assert_eq!(list["items"], Value::Array(vec![]));
}

#[test]
fn the_seed_list_filters_answer() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, addr) = serve(dir.path());
    for (name, route) in [
        ("seed-000-contract-full.json", "/admin/harness/contracts"),
        ("seed-000-evidence-full.json", "/admin/harness/evidence"),
        ("seed-000-state-full.json", "/admin/harness/shared-state"),
    ] {
        let (status, body) = call(&addr, "POST", route, Some(&read(name)));
        assert_eq!(status, 201, "{body}");
    }
    let ids = |path: &str| -> Vec<String> {
        let (status, body) = call(&addr, "GET", path, None);
        assert_eq!(status, 200, "{path}: {body}");
        body["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["id"].as_str().unwrap().to_owned())
            .collect()
    };
    let c = "/admin/harness/contracts";
    assert_eq!(
        ids(&format!(
            "{c}?riskLevel=critical&actorId=actor-7&channelId=telegram&sourceSessionId=session-ops&tag=ops&createdFromUtc=2026-11-01T00:00:00Z&createdToUtc=2026-11-03T00:00:00Z"
        )),
        ["hctr_seed_full"]
    );
    for miss in [
        "riskLevel=low",
        "actorId=someone-else",
        "tag=finance",
        "createdFromUtc=2026-11-03T00:00:00Z",
    ] {
        assert!(ids(&format!("{c}?{miss}")).is_empty(), "{miss}");
    }
    let (status, body) = call(&addr, "GET", &format!("{c}?riskLevel=extreme"), None);
    assert_eq!(status, 400);
    assert!(body.to_string().contains("extreme"), "{body}");
    let e = "/admin/harness/evidence";
    assert_eq!(
        ids(&format!(
            "{e}?confidence=high&harnessContractId=hctr_seed_full&learningProposalId=lp-3&actorId=actor-7&tag=ops&createdFromUtc=2026-11-01T00:00:00Z"
        )),
        ["evb_seed_full"]
    );
    assert!(ids(&format!("{e}?confidence=low")).is_empty());
    let s = "/admin/harness/shared-state";
    assert_eq!(
        ids(&format!(
            "{s}?createdFromUtc=2026-11-01T00:00:00Z&createdToUtc=2026-11-03T00:00:00Z&harnessContractId=hctr_seed_full"
        )),
        ["shs_seed_full"]
    );
    assert!(ids(&format!("{s}?createdToUtc=2026-11-01T00:00:00Z")).is_empty());
}

#[test]
fn the_cli_creates_and_shows_the_seed_payloads_without_loss() {
    let (_dir, data) = common::scratch();
    for (name, noun, id) in [
        ("seed-000-contract-full.json", "contracts", "hctr_seed_full"),
        ("seed-000-evidence-full.json", "evidence", "evb_seed_full"),
        ("seed-000-state-full.json", "state", "shs_seed_full"),
    ] {
        let given: Value = serde_json::from_str(&read(name)).unwrap();
        run_ok(rein(&data).args([noun, "create"]).arg(payload(name)));
        let shown = json(&run_ok(rein(&data).args([noun, "show", id, "--json"])));
        contains(&shown, &given, name);
    }
    let shown =
        String::from_utf8(run_ok(rein(&data).args(["contracts", "show", "hctr_seed_full"])).stdout)
            .unwrap();
    assert!(shown.contains("risk critical"), "{shown}");
    assert!(shown.contains("Deploy with the new key"), "{shown}");
    let shown =
        String::from_utf8(run_ok(rein(&data).args(["evidence", "show", "evb_seed_full"])).stdout)
            .unwrap();
    assert!(shown.contains("confidence high"), "{shown}");
    assert!(shown.contains("old sessions keep the old key"), "{shown}");
}

#[test]
fn a_governance_entry_is_added_by_hand_and_revoked_once() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, addr) = serve(dir.path());
    let text = read("seed-000-ledger-full.json");
    let given: Value = serde_json::from_str(&text).unwrap();
    let (status, added) = call(&addr, "POST", "/admin/governance/ledger", Some(&text));
    assert_eq!(status, 201, "{added}");
    let entry = &added["entry"];
    for (k, v) in given.as_object().unwrap() {
        if k != "id" {
            contains(&entry[k], v, k);
        }
    }
    let id = entry["id"].as_str().unwrap().to_owned();
    // What rein sets is refused, naming it; so is a field it does not know.
    for (field, value) in [("revokedBy", "bob"), ("mood", "calm")] {
        let mut v = given.clone();
        v[field] = Value::from(value);
        let (status, body) = call(
            &addr,
            "POST",
            "/admin/governance/ledger",
            Some(&v.to_string()),
        );
        assert_eq!(status, 400, "{body}");
        assert!(body.to_string().contains(field), "{body}");
    }
    let revoke = format!("/admin/governance/ledger/{id}/revoke");
    let (status, revoked) = call(
        &addr,
        "POST",
        &revoke,
        Some(r#"{"revokedBy": "bob", "reason": "the window closed"}"#),
    );
    assert_eq!(status, 200, "{revoked}");
    assert_eq!(revoked["entry"]["status"], "revoked");
    assert_eq!(revoked["entry"]["revokedBy"], "bob");
    assert_eq!(revoked["entry"]["revocationReason"], "the window closed");
    assert!(revoked["entry"]["revokedAtUtc"].is_string());
    let (status, body) = call(&addr, "POST", &revoke, Some("{}"));
    assert_eq!(status, 409, "{body}");
    assert!(body.to_string().contains("already revoked"), "{body}");
    let (status, _) = call(
        &addr,
        "POST",
        "/admin/governance/ledger/led_nope/revoke",
        Some("{}"),
    );
    assert_eq!(status, 404);
    // The list filters of the seed; the chain still verifies.
    let (_, list) = call(
        &addr,
        "GET",
        "/admin/governance/ledger?status=revoked&toolName=run_command&riskLevel=high&tag=ops",
        None,
    );
    assert_eq!(list["items"][0]["id"], id.as_str(), "{list}");
    let (_, list) = call(&addr, "GET", "/admin/governance/ledger?status=active", None);
    assert_eq!(
        list["items"].as_array().unwrap().len(),
        1,
        "the revocation itself: {list}"
    );
    let (status, body) = call(&addr, "GET", "/admin/governance/ledger?scope=planet", None);
    assert_eq!(status, 400);
    assert!(body.to_string().contains("planet"), "{body}");
    let (_, check) = call(&addr, "GET", "/admin/ledger/verify", None);
    assert_eq!(check["intact"], true, "{check}");
    assert_eq!(check["entries"], 2);
}

#[test]
fn the_ledger_commands_add_and_revoke_entries() {
    let (_dir, data) = common::scratch();
    let added = json(&run_ok(rein(&data).args([
        "ledger",
        "add",
        "--decision",
        "approved",
        "--summary",
        "deploys in the window",
        "--scope",
        "project",
        "--risk",
        "high",
        "--by",
        "ana",
        "--json",
    ])));
    assert_eq!(added["decidedBy"], "ana");
    assert_eq!(added["scope"], "project");
    let id = added["id"].as_str().unwrap().to_owned();
    let from_file = json(&run_ok(
        rein(&data)
            .args(["ledger", "add", "--json"])
            .arg(payload("seed-000-ledger-full.json")),
    ));
    assert_eq!(from_file["policyHint"]["suggestedScope"], "project");
    let out = run_ok(rein(&data).args(["ledger", "revoke", &id, "--reason", "superseded"]));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains(&format!("revoked {id}")), "{said}");
    let again = common::exits(rein(&data).args(["ledger", "revoke", &id]), 1);
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("already revoked"),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    common::exits(
        rein(&data).args(["ledger", "add", "--decision", "maybe", "--summary", "x"]),
        2,
    );
    let listed = String::from_utf8(run_ok(rein(&data).args(["ledger", "list"])).stdout).unwrap();
    assert!(listed.contains(&format!("(revokes {id})")), "{listed}");
    run_ok(rein(&data).args(["ledger", "verify"]));
}
