"""Drives a real `rein serve` through the client openapi-python-client
generated from the server's own /openapi.json: lists the tasks, reads a
task's events and plan, decides its approval, and waits until it completes.
Prints what it saw as one JSON object. Arguments: BASE_URL TOKEN TASK_ID."""

import json
import sys
import time

from rein_client import AuthenticatedClient
from rein_client.api.default import (
    get_admin_approvals,
    get_admin_tasks,
    get_admin_tasks_id,
    get_admin_tasks_id_events,
    get_admin_tasks_id_plan,
    post_admin_approvals_id_decision,
)
from rein_client.models import Decision, DecisionRequest

base, token, task = sys.argv[1], sys.argv[2], sys.argv[3]
client = AuthenticatedClient(base_url=base, token=token, raise_on_unexpected_status=True)
seen = {}

listed = get_admin_tasks.sync(client=client)
seen["listed"] = [t.id for t in listed.items]

# The approval is asked once the build step has run: wait for it.
deadline = time.monotonic() + 30
while True:
    pending = get_admin_approvals.sync(client=client, task_id=task)
    pending = [a for a in pending.items if a.status.value == "pending"]
    if pending or time.monotonic() > deadline:
        break
    time.sleep(0.05)
approval = pending[0]
seen["approval_options"] = [o for o in approval.options]

events = get_admin_tasks_id_events.sync(task, client=client)
seen["event_models"] = sorted({type(e).__name__ for e in events.items})
seen["event_types"] = [e.type_.value if hasattr(e.type_, "value") else e.type_ for e in events.items]

plan = get_admin_tasks_id_plan.sync(task, client=client)
seen["plan_steps"] = [s.id for s in plan.plan.steps]
seen["step_actions"] = sorted({type(s.action).__name__ for s in plan.plan.steps})

decided = post_admin_approvals_id_decision.sync(
    approval.id,
    client=client,
    body=DecisionRequest(decision=Decision.APPROVE, selected_option="publish", reason="generated client"),
)
seen["decided"] = decided.approval.status.value

deadline = time.monotonic() + 30
while True:
    state = get_admin_tasks_id.sync(task, client=client)
    if state.task.status.value in ("completed", "failed") or time.monotonic() > deadline:
        break
    time.sleep(0.05)
seen["status"] = state.task.status.value
print(json.dumps(seen))
