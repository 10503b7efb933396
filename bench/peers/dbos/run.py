"""DBOS: the 3-call agent run as a DBOS workflow of 3 steps (each step's result checkpointed
in DBOS's system database before the next step starts), on SQLite or PostgreSQL.

The model is a deterministic fake (a script: three tool calls, then an answer), called in
the workflow's own code, as a deterministic function must be; the tool is a POST to the
local page server. DBOS is used with its defaults, besides: no OTLP, no Conductor, a
connection pool as wide as the runs in flight.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from protocol import CALLS, arguments, measure  # first: it sets the offline environment

# isort: split

import httpx
from dbos import DBOS, DBOSConfig

ARGS = arguments(("sqlite", "postgres"))
HTTP: dict[str, httpx.AsyncClient] = {}


def fake_model(turn: int) -> dict[str, Any]:
    """The scripted model: a tool call for each of the first turns, then the final answer."""
    if turn < CALLS:
        return {"call": "webhook.post", "args": {"payload": {"n": turn}}}
    return {"final": "done"}


@DBOS.step()
async def call_tool(payload: dict[str, Any]) -> str:
    response = await HTTP["client"].post(f"{ARGS.server}/hook", json=payload)
    response.raise_for_status()
    return response.text


@DBOS.workflow()
async def agent_run(number: int) -> str:
    turn = 0
    while "call" in (decision := fake_model(turn)):
        await call_tool(decision["args"]["payload"])
        turn += 1
    return str(decision["final"])


async def main() -> None:
    url = f"sqlite:///{ARGS.url}" if ARGS.db == "sqlite" else ARGS.url
    config: DBOSConfig = {
        "name": "enverif-bench-peers",
        "system_database_url": url,
        "sys_db_pool_size": ARGS.in_flight + 4,
        "enable_otlp": False,
        "log_level": "WARNING",
    }
    DBOS(config=config)
    DBOS.launch()
    HTTP["client"] = httpx.AsyncClient(timeout=10, trust_env=False)

    async def run(number: int) -> None:
        if await agent_run(number) != "done":
            raise RuntimeError(f"run {number} did not finish")

    try:
        await measure(run, ARGS)
    finally:
        await HTTP["client"].aclose()
        DBOS.destroy()


if __name__ == "__main__":
    import uvloop

    uvloop.run(main())
