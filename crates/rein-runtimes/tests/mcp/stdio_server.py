"""What rein's test MCP servers over stdio share: a JSON-RPC message a line
in, an answer a line out for each request."""
import json
import sys


def serve(name, tools, call):
    """Answers `initialize` as server `name`, `tools/list` with `tools`, and
    `tools/call` with the text `call(arguments)` returns; any other request
    with an empty result. Notifications are read and not answered."""
    for line in sys.stdin:
        msg = json.loads(line)
        if "id" not in msg:
            continue
        method = msg.get("method")
        if method == "initialize":
            result = {
                "protocolVersion": msg["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": name, "version": "1"},
            }
        elif method == "tools/list":
            result = {"tools": tools}
        elif method == "tools/call":
            text = call(msg["params"].get("arguments", {}))
            result = {"content": [{"type": "text", "text": text}]}
        else:
            result = {}
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}) + "\n")
        sys.stdout.flush()
