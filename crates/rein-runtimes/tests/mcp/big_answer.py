"""An MCP server over stdio with answers as big as asked, for rein's tests:
one tool, `emit {bytes}`, answers a text of that many bytes: `BEGIN`, then
`x`s, then `END`."""
import json
import sys

for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    method = msg.get("method")
    if method == "initialize":
        result = {
            "protocolVersion": msg["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "big-answer", "version": "1"},
        }
    elif method == "tools/list":
        result = {"tools": [{
            "name": "emit",
            "description": "Answers a text of `bytes` bytes",
            "inputSchema": {
                "type": "object",
                "properties": {"bytes": {"type": "integer", "minimum": 8}},
                "required": ["bytes"],
            },
        }]}
    elif method == "tools/call":
        n = int(msg["params"]["arguments"]["bytes"])
        text = "BEGIN" + "x" * (n - 8) + "END"
        result = {"content": [{"type": "text", "text": text}]}
    else:
        result = {}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}) + "\n")
    sys.stdout.flush()
