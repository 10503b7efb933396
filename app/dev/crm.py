"""The demo's CRM: a real MCP server, built with the official SDK's server side (MCPServer),
that ``enverif dev`` serves at ``/dev/crm/mcp`` on the stack's loopback socket, registered in the
demo workspace as the MCP server ``crm`` (docs/extending/mcp.md).

Tools, with the annotations that give them their risk class:

* ``search_companies`` (``readOnlyHint``: ``READ``, runs at once) — companies of the dev
  catalogue whose name or domain contains the query;
* ``create_lead`` (not read-only, not destructive, open world: ``EXTERNAL_WRITE``, waits for
  approval) — one lead per company given. Calls are counted per ``_meta.idempotencyKey``
  (the step id): a call sent again after a crash answers the leads it created the first time
  and creates nothing new, and ``GET /dev/crm/leads`` shows how often each key came;
* ``send_email`` (``EXTERNAL_WRITE``) — put in the outbox, never sent anywhere.

What the CRM holds lives in the process's memory, like the webhook sink: fine for the
single-process dev stack, and why it is only mounted in dev mode. The SDK's DNS-rebinding
protection answers only requests whose ``Host`` is a loopback name. The tools are
coroutines, so they run one at a time on the app's event loop (the SDK would run plain
functions in threads).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import Tool, ToolAnnotations
from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Mount, Route

from app.clock import utcnow
from app.dev.routes import CATALOGUE

SERVER_NAME = "crm"
MOUNT_PATH = "/dev/crm"
MCP_PATH = "/mcp"
MAX_LEADS = 1_000
MAX_SEARCH_RESULTS = 20


class Company(BaseModel):
    domain: str
    name: str
    score: int | None = None


@dataclass
class CrmState:
    leads: list[dict[str, Any]] = field(default_factory=list)
    outbox: list[dict[str, Any]] = field(default_factory=list)
    # idempotency key -> (times seen, the answer of the first call)
    by_key: dict[str, tuple[int, dict[str, Any]]] = field(default_factory=dict)


def _key(ctx: Context | None) -> str | None:
    meta = ctx.request_context.meta if ctx is not None else None
    key = (meta or {}).get("idempotencyKey")
    return key if isinstance(key, str) else None


def build_server(state: CrmState) -> MCPServer:
    server = MCPServer(SERVER_NAME, instructions="The Enverif demo CRM: companies, leads, an outbox.")

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    async def search_companies(query: str) -> dict[str, Any]:
        """Companies whose name or domain contains the query (case-insensitive)."""
        wanted = query.casefold()
        found = [
            {"domain": d, "name": n, "country": c, "employees": e, "sector": s}
            for d, n, c, e, s, _ in CATALOGUE
            if wanted in d.casefold() or wanted in n.casefold()
        ]
        return {"companies": found[:MAX_SEARCH_RESULTS]}

    @server.tool(
        annotations=ToolAnnotations(destructive_hint=False, idempotent_hint=True, open_world_hint=True)
    )
    async def create_lead(companies: list[Company], ctx: Context) -> dict[str, Any]:
        """Create one sales lead per company. A call repeated with the same idempotency key
        creates nothing new and answers what the first one created."""
        key = _key(ctx)
        if key is not None and key in state.by_key:
            seen, answer = state.by_key[key]
            state.by_key[key] = (seen + 1, answer)
            return {**answer, "duplicate": True}
        created = []
        for company in companies:
            lead = {
                "id": f"lead-{len(state.leads) + 1}", "domain": company.domain, "name": company.name,
                "score": company.score, "createdAt": utcnow().isoformat(), "idempotencyKey": key,
            }  # fmt: skip
            state.leads.append(lead)
            created.append({"id": lead["id"], "domain": company.domain})
        del state.leads[:-MAX_LEADS]
        answer = {"created": created}
        if key is not None:
            state.by_key[key] = (1, answer)
        return {**answer, "duplicate": False}

    @server.tool(annotations=ToolAnnotations(destructive_hint=False, open_world_hint=True))
    async def send_email(to: str, subject: str, body: str, ctx: Context) -> str:
        """Send an e-mail (the demo puts it in the CRM's outbox; nothing leaves the machine)."""
        state.outbox.append({"to": to, "subject": subject, "body": body, "idempotencyKey": _key(ctx)})
        del state.outbox[:-MAX_LEADS]
        return f"queued for {to}"

    return server


class DemoCrm:
    """One per app: the MCP server, its ASGI app and what it holds. The SDK's session manager
    runs once per app, in the app's lifespan (``running``)."""

    def __init__(self) -> None:
        self.state = CrmState()
        self.server = build_server(self.state)
        self.app = self.server.streamable_http_app(streamable_http_path=MCP_PATH)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        async with self.server.session_manager.run():
            yield

    def routes(self) -> list[BaseRoute]:
        return [Route(f"{MOUNT_PATH}/leads", self.leads, methods=["GET"]), Mount(MOUNT_PATH, app=self.app)]

    async def leads(self, request: Request) -> JSONResponse:
        return JSONResponse({
            "leads": self.state.leads, "outbox": self.state.outbox,
            "callsPerKey": {key: seen for key, (seen, _) in self.state.by_key.items()},
        })  # fmt: skip


async def tool_list() -> list[Tool]:
    """The tools as the server lists them, read in-process (no network): what the demo
    workspace's ``crm`` server is seeded with before the stack listens."""
    return await build_server(CrmState()).list_tools()


def url(base_url: str) -> str:
    return f"{base_url}{MOUNT_PATH}{MCP_PATH}"
