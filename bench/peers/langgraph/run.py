"""LangGraph: the 3-call agent run as a ReAct agent (``create_react_agent``: a model node and
a tool node in a loop) with a deterministic fake chat model, checkpointed at every superstep
before the next one starts (``durability="sync"``), on SQLite (``langgraph-checkpoint-sqlite``)
or MariaDB (``langgraph-checkpoint-mysql``, on an asyncmy pool as wide as the runs in flight).

The fake model answers with one tool call for each of its first 3 turns and then a final
message; the tool is a POST to the local page server. One thread (checkpoint history) per run.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from protocol import CALLS, arguments, measure  # first: it sets the offline environment

# isort: split

import httpx
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.prebuilt import create_react_agent

ARGS = arguments(("sqlite", "mariadb"))
HTTP: dict[str, httpx.AsyncClient] = {}


class FakeModel(BaseChatModel):
    """A scripted chat model: a tool call while fewer than 3 tool results are in the
    conversation, then the final answer. No I/O."""

    @property
    def _llm_type(self) -> str:
        return "enverif-bench-fake"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> FakeModel:  # type: ignore[override]
        return self

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:  # fmt: skip
        done = sum(isinstance(m, ToolMessage) for m in messages)
        if done < CALLS:
            message = AIMessage(content="", tool_calls=[
                {"name": "webhook_post", "args": {"n": done}, "id": f"call-{done}", "type": "tool_call"}
            ])  # fmt: skip
        else:
            message = AIMessage(content="done")
        return ChatResult(generations=[ChatGeneration(message=message)])

    async def _agenerate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                         **kwargs: Any) -> ChatResult:  # fmt: skip
        return self._generate(messages, stop, **kwargs)


@tool
async def webhook_post(n: int) -> str:
    """POST a payload to the local page server."""
    response = await HTTP["client"].post(f"{ARGS.server}/hook", json={"n": n})
    response.raise_for_status()
    return response.text


@asynccontextmanager
async def checkpointer() -> AsyncIterator[BaseCheckpointSaver[Any]]:
    if ARGS.db == "sqlite":
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        async with AsyncSqliteSaver.from_conn_string(ARGS.url) as saver:
            await saver.setup()
            yield saver
        return
    import asyncmy  # type: ignore[import-untyped]
    from langgraph.checkpoint.mysql.asyncmy import AsyncMySaver

    parsed = urlparse(ARGS.url)
    pool = await asyncmy.create_pool(host=parsed.hostname, port=parsed.port or 3306, user=parsed.username,
                                     password=parsed.password or "", db=parsed.path[1:], autocommit=True,
                                     minsize=ARGS.in_flight, maxsize=ARGS.in_flight)  # fmt: skip
    try:
        saver = AsyncMySaver(pool)
        await saver.setup()
        yield saver
    finally:
        pool.close()
        await pool.wait_closed()


async def main() -> None:
    async with checkpointer() as saver, httpx.AsyncClient(timeout=10, trust_env=False) as client:
        HTTP["client"] = client
        # create_react_agent is deprecated for langchain's create_agent (another package).
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        agent = create_react_agent(FakeModel(), [webhook_post], checkpointer=saver)

        async def run(number: int) -> None:
            state = await agent.ainvoke(
                {"messages": [{"role": "user", "content": "benchmark"}]},
                {"configurable": {"thread_id": f"run-{number}"}},
                durability="sync",
            )
            if state["messages"][-1].content != "done":
                raise RuntimeError(f"run {number} did not finish: {state['messages'][-1]!r}")

        await measure(run, ARGS)


if __name__ == "__main__":
    import uvloop

    uvloop.run(main())
