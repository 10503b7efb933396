"""The dev stack's demo CRM (app/dev/crm.py) as any MCP client meets it: the official SDK's
client over streamable HTTP on loopback. A call sent again with the same idempotency key
creates nothing new (the redelivery story the prospector's leads rely on)."""

from __future__ import annotations

from typing import Any

import httpx
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from starlette.applications import Starlette

from app.dev.crm import DemoCrm
from tests.support.servers import serve

NORTHWIND = {"domain": "northwind.example", "name": "Northwind Analytics", "score": 86}


async def test_the_demo_crm_lists_its_tools_and_creates_leads_once_per_key() -> None:
    crm = DemoCrm()
    app = Starlette(routes=crm.routes(), lifespan=lambda _: crm.running())
    async with serve(app, lifespan="on") as url:
        async with (
            streamable_http_client(f"{url}/dev/crm/mcp") as (read, write),
            ClientSession(read, write) as mcp,
        ):
            await mcp.initialize()
            listed = {t.name: t.annotations for t in (await mcp.list_tools()).tools}
            found = await mcp.call_tool("search_companies", {"query": "NORTH"})
            calls: list[Any] = [
                await mcp.call_tool("create_lead", {"companies": [NORTHWIND]}, meta={"idempotencyKey": key})
                for key in ("step-1", "step-1", "step-2")
            ]
            bad = await mcp.call_tool(
                "create_lead", {"companies": "not a list"}, meta={"idempotencyKey": "step-3"}
            )
        async with httpx.AsyncClient(base_url=url) as http:
            held = (await http.get("/dev/crm/leads")).json()

    assert set(listed) == {"search_companies", "create_lead", "send_email"}
    assert listed["search_companies"] is not None and listed["search_companies"].read_only_hint is True
    assert listed["create_lead"] is not None and listed["create_lead"].destructive_hint is False
    assert [c["domain"] for c in (found.structured_content or {})["companies"]] == ["northwind.example"]
    answers = [c.structured_content for c in calls]
    assert answers[0] == {"created": [{"id": "lead-1", "domain": "northwind.example"}], "duplicate": False}
    assert answers[1] == {**answers[0], "duplicate": True}  # sent again: the first answer
    assert answers[2] == {"created": [{"id": "lead-2", "domain": "northwind.example"}], "duplicate": False}
    assert bad.is_error
    assert [lead["idempotencyKey"] for lead in held["leads"]] == ["step-1", "step-2"]
    assert held["callsPerKey"] == {"step-1": 2, "step-2": 1}
