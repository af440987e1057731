"""Drives a real `rein serve` through the client openapi-python-client
generated from the server's own /openapi.json: lists the tasks, reads a
task's events and plan, decides its approval, and waits until it completes.
Each call is named by its operation's `operationId` (`list_tasks`, `decide`).
Prints what it saw as one JSON object. Arguments: BASE_URL TOKEN TASK_ID."""

import json
import sys
import time

from rein_client import AuthenticatedClient
from rein_client.api.default import (
    list_approvals,
    list_tasks,
    show_task,
    task_events,
    task_plan,
    decide,
)
from rein_client.models import Decision, DecisionRequest

base, token, task = sys.argv[1], sys.argv[2], sys.argv[3]
client = AuthenticatedClient(base_url=base, token=token, raise_on_unexpected_status=True)
seen = {}

listed = list_tasks.sync(client=client)
seen["listed"] = [t.id for t in listed.items]

# The approval is asked once the build step has run: wait for it.
deadline = time.monotonic() + 30
while True:
    pending = list_approvals.sync(client=client, task_id=task)
    pending = [a for a in pending.items if a.status.value == "pending"]
    if pending or time.monotonic() > deadline:
        break
    time.sleep(0.05)
approval = pending[0]
seen["approval_options"] = [o for o in approval.options]

events = task_events.sync(task, client=client)
seen["event_models"] = sorted({type(e).__name__ for e in events.items})
seen["event_types"] = [e.type_.value if hasattr(e.type_, "value") else e.type_ for e in events.items]

plan = task_plan.sync(task, client=client)
seen["plan_steps"] = [s.id for s in plan.plan.steps]
seen["step_actions"] = sorted({type(s.action).__name__ for s in plan.plan.steps})

decided = decide.sync(
    approval.id,
    client=client,
    body=DecisionRequest(decision=Decision.APPROVE, selected_option="publish", reason="generated client"),
)
seen["decided"] = decided.approval.status.value

deadline = time.monotonic() + 30
while True:
    state = show_task.sync(task, client=client)
    if state.task.status.value in ("completed", "failed") or time.monotonic() > deadline:
        break
    time.sleep(0.05)
seen["status"] = state.task.status.value
print(json.dumps(seen))
