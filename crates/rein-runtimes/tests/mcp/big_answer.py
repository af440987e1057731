"""An MCP server over stdio with answers as big as asked, for rein's tests:
one tool, `emit {bytes}`, answers a text of that many bytes: `BEGIN`, then
`x`s, then `END`."""
import sys

sys.dont_write_bytecode = True  # nothing written beside the tests
from stdio_server import serve  # noqa: E402

EMIT = {
    "name": "emit",
    "description": "Answers a text of `bytes` bytes",
    "inputSchema": {
        "type": "object",
        "properties": {"bytes": {"type": "integer", "minimum": 8}},
        "required": ["bytes"],
    },
}


def emit(arguments):
    n = int(arguments["bytes"])
    return "BEGIN" + "x" * (n - 8) + "END"


serve("big-answer", [EMIT], emit)
