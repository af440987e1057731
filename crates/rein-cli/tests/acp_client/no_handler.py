"""`rein acp` driven by acp-client (from PyPI) with no permission handler:
it answers every permission request `cancelled`, which by the protocol
cancels the turn. Asks ACP_PROMPT in ACP_CWD of `rein acp` (REIN_BIN, with
the arguments REIN_ARGS, a JSON list); prints the reply and the updates seen
as one JSON object. A turn that does not end within 60 s is an error."""

import asyncio
import json
import os
from pathlib import Path

from acp_client import Agent


async def main() -> None:
    command = [os.environ["REIN_BIN"], "acp", *json.loads(os.environ["REIN_ARGS"])]
    agent = Agent(command, Path(os.environ["ACP_CWD"]))
    updates = []
    try:
        reply = await asyncio.wait_for(
            agent.ask(os.environ["ACP_PROMPT"], on_update=lambda u: updates.append(u.get("sessionUpdate"))),
            60,
        )
        print(json.dumps({"reply": reply, "updates": updates, "session": agent.session}))
    finally:
        await agent.stop()


asyncio.run(main())
