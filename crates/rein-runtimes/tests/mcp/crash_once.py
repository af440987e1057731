"""An MCP server over stdio that crashes, for rein's tests: it offers one
tool, `work`; its first call ever (a marker file in its working directory
says whether there was one) writes to stderr and exits with status 3 instead
of answering; every later call answers `worked`."""
import os
import sys

sys.dont_write_bytecode = True  # nothing written beside the tests
from stdio_server import serve  # noqa: E402

MARKER = "crashed-once"

WORK = {
    "name": "work",
    "description": "Does the work (crashes the first time)",
    "inputSchema": {"type": "object", "properties": {}},
}


def work(_arguments):
    if not os.path.exists(MARKER):
        open(MARKER, "w").close()
        sys.stderr.write("boom: the server fell over\n")
        sys.stderr.flush()
        sys.exit(3)
    return "worked"


serve("crash-once", [WORK], work)
