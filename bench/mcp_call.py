"""Worker CPU of one MCP READ call beside one ``http.get``, measured in the same run.

Both tools run as a worker runs them (``McpTool.run``: schema check, the shared session of
``McpConnections``, the result's conversion; ``HttpGetTool.run``: the guarded client), one
call after another, against servers in processes of their own on 127.0.0.1: the test CRM of
``tests/support/mcp_server.py`` over streamable HTTP, and a plain-text page server. What is
measured is this process's CPU (user + system) per call, after a warm-up, and the wall time.

    .venv/bin/python bench/mcp_call.py [--calls N]
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

from app.domain.mcp import Transport
from app.domain.policy import RiskClass
from app.engine.base import ToolContext
from app.engine.mcp_client import McpConnections, ServerSpec
from app.engine.tools.http import HttpGetTool
from app.engine.tools.mcp import McpTool
from app.settings import Settings

REPO = Path(__file__).parents[1]
PAGE_SERVER = """
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        body = b'{"companies": [{"name": "Acme GmbH", "employees": 12}]}'
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start_servers(log: Path, mcp_port: int, page_port: int) -> list[subprocess.Popen[bytes]]:
    mcp_server = [sys.executable, str(REPO / "tests/support/mcp_server.py"), "--log", str(log)]
    return [
        subprocess.Popen(
            [*mcp_server, "--http", str(mcp_port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        ),
        subprocess.Popen([sys.executable, "-c", PAGE_SERVER, str(page_port)]),
    ]


async def wait_port(port: int) -> None:
    for _ in range(400):
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            return
        except OSError:
            await asyncio.sleep(0.05)
    raise SystemExit(f"nothing listens on {port}")


async def measure(name: str, call: object, calls: int) -> tuple[float, float]:
    run = call  # an async callable
    for _ in range(20):  # warm-up: sessions, connections, caches
        await run()  # type: ignore[operator]
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for _ in range(calls):
        await run()  # type: ignore[operator]
    cpu_ms = (time.process_time() - cpu0) * 1000 / calls
    wall_ms = (time.perf_counter() - wall0) * 1000 / calls
    print(f"{name:>28}: {cpu_ms:6.2f} ms CPU per call, {wall_ms:6.2f} ms wall per call ({calls} calls)")
    return cpu_ms, wall_ms


async def main(calls: int) -> None:
    settings = Settings(http_allow_private_networks=True)
    log = Path(tempfile.mkdtemp()) / "calls.jsonl"
    mcp_port, page_port = free_port(), free_port()
    procs = start_servers(log, mcp_port, page_port)
    try:
        await wait_port(mcp_port)
        await wait_port(page_port)
        connections = McpConnections(settings)
        spec = ServerSpec(
            1, 1, "crm", Transport.STREAMABLE_HTTP, f"http://127.0.0.1:{mcp_port}/mcp", None, ()
        )
        row = SimpleNamespace(
            name="search_companies", description="Find companies",
            input_schema={"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
        )  # fmt: skip
        mcp_tool = McpTool(spec, row, risk=RiskClass.READ, connections=connections)  # type: ignore[arg-type]
        http_tool = HttpGetTool(settings)
        ctx = ToolContext(workspace_id=1, agent_id=1, run_id=1, step_id=1, settings=settings)
        url = f"http://127.0.0.1:{page_port}/companies"
        http_cpu, _ = await measure("http.get", lambda: http_tool.run(ctx, {"url": url}), calls)
        mcp_cpu, _ = await measure(
            "mcp.crm.search_companies", lambda: mcp_tool.run(ctx, {"query": "Acme"}), calls
        )
        print(f"{'ratio':>28}: the MCP call costs {mcp_cpu / http_cpu:.1f}x the CPU of the http.get")
        await http_tool.aclose()
        await connections.aclose()
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=300)
    asyncio.run(main(parser.parse_args().calls))
