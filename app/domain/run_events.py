"""Run event types: the append-only log of a run tree (docs/architecture.md)."""

from __future__ import annotations

import enum


class EventType(enum.StrEnum):
    RUN_CREATED = "RUN_CREATED"
    RUN_STATUS_CHANGED = "RUN_STATUS_CHANGED"
    STEP_STARTED = "STEP_STARTED"
    STEP_FINISHED = "STEP_FINISHED"
    APPROVAL_REQUESTED = "APPROVAL_REQUESTED"
    APPROVAL_DECIDED = "APPROVAL_DECIDED"
    MEMORY_INJECTED = "MEMORY_INJECTED"
    MEMORY_WRITTEN = "MEMORY_WRITTEN"
    # Budgets (docs/concepts/budgets.md): a call refused over a limit (its step's seq, tool
    # and message), or a run ended because a limit of its chain is spent (the message);
    # a call refused as a repeat of identical ones.
    BUDGET_EXCEEDED = "BUDGET_EXCEEDED"
    LOOP_DETECTED = "LOOP_DETECTED"
