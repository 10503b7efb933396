"""THE chokepoint for run state: every status change of a run, step or approval happens
inside a ``TreeTx`` (``tree.py``: locking, events, run states, after-commit work;
``steps.py``: step and approval states), and every run is created here too
(``creation.py``: roots of new trees and children alike), and held runs are released here
(``holds.py``). Nothing else assigns a status."""

from app.services.transitions.creation import NewRun
from app.services.transitions.holds import Released, release_held, release_quota
from app.services.transitions.outbox import WakeUp, after_commit, enqueue_run
from app.services.transitions.steps import read_steps, rejection_result
from app.services.transitions.tree import LeaseLost, NewTree, TreeTx, new_tree_tx, tree_tx

__all__ = [
    "LeaseLost",
    "NewRun",
    "NewTree",
    "Released",
    "TreeTx",
    "WakeUp",
    "after_commit",
    "enqueue_run",
    "new_tree_tx",
    "read_steps",
    "rejection_result",
    "release_held",
    "release_quota",
    "tree_tx",
]
