"""A harness plugin for rein's tests, speaking the plugin protocol
(newline-delimited JSON-RPC 2.0 over stdio). Its first argument chooses how it
behaves once initialized: `ok`, `crash-once MARKER` (exits on its first call
unless MARKER exists, which it creates), `hang`, `garbage`, or `reset-fails`
(every `harness/reset` fails its required cleanup). An attempt whose prompt is
`hang once` waits, the first time in a workspace, until rein is gone."""

import base64
import json
import os
import sys
import time

mode = sys.argv[1] if len(sys.argv) > 1 else "ok"


def send(message):
    message["jsonrpc"] = "2.0"
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def answer(mid, result):
    send({"id": mid, "result": result})


def fail(mid, code, message):
    send({"id": mid, "error": {"code": code, "message": message}})


for line in sys.stdin:
    msg = json.loads(line)
    mid, method, params = msg.get("id"), msg.get("method"), msg.get("params") or {}
    if method == "initialize":
        answer(mid, {"protocolVersion": 2})
        continue
    if mid is None:
        continue  # a notification (harness/cancel)
    if mode == "crash-once":
        marker = sys.argv[2]
        if not os.path.exists(marker):
            open(marker, "w").close()
            sys.exit(3)
    elif mode == "hang":
        time.sleep(3600)
    elif mode == "garbage":
        sys.stdout.write("this is not JSON-RPC\n")
        sys.stdout.flush()
        continue
    if method == "harness/supports":
        context = params["context"]
        if context["provider"] == "compat":
            # The seed's supports(), ported literally: only where the
            # provider's runtime policy declares this harness compatible and
            # the request transport is not overridden.
            provider = context["modelProvider"]
            if ("echo" in provider["runtimePolicy"]["compatibleIds"]
                    and provider["requestTransportOverrides"] != "present"):
                answer(mid, {"supported": True, "priority": 1,
                             "reason": "declared compatible; session " + str(context.get("sessionKey"))})
            else:
                answer(mid, {"supported": False, "reason": "effective route is not harness-compatible"})
        elif context["provider"] == "openai":
            answer(mid, {"supported": True, "priority": 5, "reason": "echo serves openai"})
        else:
            answer(mid, {"supported": False, "reason": "only openai"})
    elif method == "harness/runAttempt":
        attempt = params["attemptId"]
        marker = os.path.join(params["workspace"], "hung")
        if params["prompt"] == "hang once" and not os.path.exists(marker):
            open(marker, "w").close()
            parent = os.getppid()
            # Until rein is killed (this process is orphaned), then gone too.
            for _ in range(600):
                if os.getppid() != parent:
                    sys.exit(0)
                time.sleep(0.1)
            sys.exit(0)
        for word in params["prompt"].split():
            send({"method": "harness/partialReply", "params": {"attemptId": attempt, "text": word}})
        send({"method": "harness/agentEvent",
              "params": {"attemptId": attempt, "event": {"kind": "tool", "tools": params["tools"]}}})
        result = {"text": params["prompt"].upper(), "stopReason": "stop"}
        for image in params.get("images", []):
            # What it was shown: the type, the path, and the bytes' length
            # and first four, decoded (a PNG starts 89 50 4e 47).
            raw = base64.b64decode(image["data"])
            result["text"] += " [%s %s %d bytes %s]" % (
                image["mimeType"], image["path"], len(raw), raw[:4].hex())
        if params["prompt"].startswith("pid"):
            # Which program answered: a reload starts a new one.
            result["text"] += " %d" % os.getpid()
        if params["prompt"].startswith("who"):
            # Who ran it, and for whom when the session is another plugin's.
            result["text"] += " by " + params["harnessId"]
            scope = params.get("delegatedExecution")
            if scope:
                result["text"] += " for %s on %s" % (scope["ownerPluginId"], scope["ownerHarnessId"])
        if params["prompt"].startswith("metered"):
            # What its own model calls used (the optional usage of the result).
            result["usage"] = {"inputTokens": 30, "cachedInputTokens": 10,
                               "outputTokens": 7, "model": "echo-1"}
        answer(mid, result)
    elif method == "completion/isolated":
        auth = params["auth"]
        if auth["profileId"] == "expired":
            fail(mid, -32011, "token expired")
        else:
            answer(mid, {"content": [{"type": "text", "text": "Title: " + params["prompt"][:12]}],
                         "stopReason": "stop", "requestDurationMs": 7})
    elif method == "harness/reset":
        if params["sessionKey"] == "stuck" or mode == "reset-fails":
            fail(mid, -32010, "the native sandbox is still attached")
        else:
            answer(mid, {})
    elif method in ("executor/ensure", "executor/retire"):
        with open(os.path.join(params["workspaceDirectory"], "executor.log"), "a") as log:
            log.write(method + " " + params["environmentId"] + "\n")
            log.flush()
        answer(mid, {})
    else:
        fail(mid, -32601, "method not found: " + str(method))
