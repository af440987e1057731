"""An MCP server over stdio that crashes, for rein's tests: it offers one
tool, `work`; its first call ever (a marker file in its working directory
says whether there was one) writes to stderr and exits with status 3 instead
of answering; every later call answers `worked`."""
import json
import os
import sys

MARKER = "crashed-once"

for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    method = msg.get("method")
    if method == "initialize":
        result = {
            "protocolVersion": msg["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "crash-once", "version": "1"},
        }
    elif method == "tools/list":
        result = {"tools": [{
            "name": "work",
            "description": "Does the work (crashes the first time)",
            "inputSchema": {"type": "object", "properties": {}},
        }]}
    elif method == "tools/call":
        if not os.path.exists(MARKER):
            open(MARKER, "w").close()
            sys.stderr.write("boom: the server fell over\n")
            sys.stderr.flush()
            sys.exit(3)
        result = {"content": [{"type": "text", "text": "worked"}]}
    else:
        result = {}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}) + "\n")
    sys.stdout.flush()
