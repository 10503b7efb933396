"""The tree as the events so far describe it: pure bookkeeping, no I/O. ``TreeState.apply``
takes each ``runTree`` event in seq order; the view draws what it holds."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.graphql.ids import to_global_id

TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")
# How much of a turn's live output a node keeps (the view shows the end of it).
MAX_OUTPUT_CHARS = 2_000


@dataclass
class RunNode:
    id: str
    parent_id: str | None
    agent: str = "?"
    status: str = "?"
    step: str = ""
    # The current turn's live model output (``runOutput``), its end when long.
    output: str = ""


@dataclass
class TreeState:
    root_id: str
    runs: dict[str, RunNode] = field(default_factory=dict)
    # approval id -> (run id, tool)
    approvals: dict[str, tuple[str, str]] = field(default_factory=dict)
    # The newest event applied: a resumed subscription asks for the events after it.
    last_seq: int = 0

    def node(self, run_id: str, parent_id: str | None = None) -> RunNode:
        if run_id not in self.runs:
            self.runs[run_id] = RunNode(id=run_id, parent_id=parent_id)
        elif parent_id is not None:
            self.runs[run_id].parent_id = parent_id
        return self.runs[run_id]

    def is_new(self, event: dict[str, Any]) -> bool:
        """False for an event already applied (a server that replays what it sent before
        a reconnect must not make the watcher print it twice)."""
        return int(event["seq"]) > self.last_seq

    def apply(self, event: dict[str, Any]) -> None:
        self.last_seq = max(self.last_seq, int(event["seq"]))
        run = self.node(event["runId"], event.get("parentRunId"))
        payload = event.get("payload") or {}
        run.agent = event.get("agentName") or payload.get("agent") or run.agent
        kind = event["type"]
        if kind in ("RUN_CREATED", "RUN_STATUS_CHANGED"):
            run.status = event.get("status") or run.status
            if run.status in TERMINAL:
                run.step = ""
        elif kind in ("STEP_STARTED", "STEP_FINISHED"):
            tool = event.get("stepTool") or payload.get("tool") or "answer"
            decision = event.get("stepDecision") or payload.get("decision")
            status = event.get("stepStatus") or payload.get("status") or ""
            note = f", {decision}" if decision and kind == "STEP_STARTED" else ""
            run.step = f"step {payload.get('seq', '?')} {tool} ({status}{note})"
        elif kind == "APPROVAL_REQUESTED":
            tool = event.get("stepTool") or payload.get("tool") or "?"
            self.approvals[approval_id(event)] = (run.id, tool)
        elif kind == "APPROVAL_DECIDED":
            self.approvals.pop(approval_id(event), None)

    def apply_output(self, chunk: dict[str, Any]) -> str | None:
        """Take a ``runOutput`` chunk; returns the turn's whole text (as kept) when it ends."""
        run = self.node(chunk["runId"])
        if chunk.get("done"):
            text, run.output = run.output, ""
            return text
        run.output = (run.output + chunk.get("text", ""))[-MAX_OUTPUT_CHARS:]
        return None

    @property
    def root(self) -> RunNode:
        return self.node(self.root_id)


def approval_id(event: dict[str, Any]) -> str:
    """The event's approval as a GraphQL id (older events carry only the database id)."""
    if event.get("approvalId"):
        return str(event["approvalId"])
    raw = (event.get("payload") or {}).get("approvalId")
    return to_global_id("Approval", int(raw)) if isinstance(raw, int) else str(raw)
