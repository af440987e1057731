"""An ACP agent that misbehaves, for rein's tests: `crash` exits after
initialize, `garbage` answers with a line that is not JSON-RPC, `hang` never
answers, `exit-early` exits before reading anything, `orphan PIDFILE` starts a
child of its own (its pid written to PIDFILE) and never answers."""
import json
import subprocess
import sys
import time

mode = sys.argv[1]
if mode == "orphan":
    child = subprocess.Popen(["sleep", "300"])
    with open(sys.argv[2], "w") as f:
        f.write(str(child.pid))
    mode = "hang"
if mode == "exit-early":
    sys.stderr.write("cannot start: no model configured\n")
    sys.exit(2)
for line in sys.stdin:
    msg = json.loads(line)
    if mode == "hang":
        continue
    if msg.get("method") == "initialize":
        if mode == "garbage":
            sys.stdout.write("this is not json-rpc\n")
            sys.stdout.flush()
            continue
        reply = {"jsonrpc": "2.0", "id": msg["id"], "result": {"protocolVersion": 1, "agentCapabilities": {}}}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
    elif msg.get("method") == "session/new":
        if mode == "crash":
            # Coloured, as a terminal-minded agent writes it.
            sys.stderr.write("\x1b[1;31magent panicked:\x1b[0m out of cheese\x1b[K\n")
            sys.stderr.flush()
            sys.exit(3)
        reply = {"jsonrpc": "2.0", "id": msg["id"], "result": {"sessionId": "s1"}}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
    elif msg.get("method") == "session/prompt":
        if mode == "crash-in-turn":
            sys.stderr.write("agent died mid-turn\n")
            sys.exit(4)
        time.sleep(3600)
