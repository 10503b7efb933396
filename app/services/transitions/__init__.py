"""THE chokepoint for run state: every status change of a run, step or approval happens
inside a ``TreeTx`` (``tree.py``: locking, events, run states, after-commit work;
``steps.py``: step and approval states). Nothing else assigns a status."""

from app.services.transitions.outbox import WakeUp, after_commit, enqueue_run
from app.services.transitions.steps import read_steps, rejection_result
from app.services.transitions.tree import LeaseLost, TreeTx, tree_tx

__all__ = [
    "LeaseLost",
    "TreeTx",
    "WakeUp",
    "after_commit",
    "enqueue_run",
    "read_steps",
    "rejection_result",
    "tree_tx",
]
