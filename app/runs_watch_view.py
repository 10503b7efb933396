"""The terminal view of ``enverif runs watch``: the run tree drawn with ``rich``, redrawn in
place on every event (one live region at the bottom of the terminal, nothing scrolls)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Console, Group
from rich.live import Live
from rich.text import Text
from rich.tree import Tree

if TYPE_CHECKING:
    from app.runs_watch import RunNode, TreeState

STATUS_STYLES = {
    "QUEUED": "dim",
    "RUNNING": "bold blue",
    "WAITING_APPROVAL": "bold yellow",
    "WAITING_CHILD": "cyan",
    "SUCCEEDED": "bold green",
    "FAILED": "bold red",
    "CANCELLED": "magenta",
}


def _label(run: RunNode) -> Text:
    text = Text.assemble((run.agent, "bold"), " ", (run.id, "dim"), " ")
    text.append(run.status, style=STATUS_STYLES.get(run.status, ""))
    if run.step:
        text.append(f"  {run.step}", style="italic")
    return text


def render(state: TreeState, footer: str) -> Group:
    children: dict[str | None, list[RunNode]] = {}
    for run in state.runs.values():
        parent = run.parent_id if run.parent_id in state.runs else None
        if run.id != state.root_id:
            children.setdefault(parent or state.root_id, []).append(run)
    pending: dict[str, list[tuple[str, str]]] = {}
    for approval_id, (run_id, tool) in state.approvals.items():
        pending.setdefault(run_id, []).append((approval_id, tool))

    def grow(branch: Tree, run: RunNode) -> None:
        for approval_id, tool in pending.get(run.id, []):
            branch.add(Text.assemble(("approval pending ", "bold yellow"), f"{tool}  ", (approval_id, "dim")))
        for child in children.get(run.id, []):
            grow(branch.add(_label(child)), child)

    tree = Tree(_label(state.root))
    grow(tree, state.root)
    waiting = len(state.approvals)
    header = Text.assemble(
        ("Run tree ", "bold"), (state.root_id, "dim"),
        f"  {len(state.runs)} run{'s' if len(state.runs) != 1 else ''}",
        f"  {waiting} approval{'s' if waiting != 1 else ''} pending",
        f"  seq {state.last_seq}",
    )  # fmt: skip
    return Group(header, tree, Text(footer, style="dim"))


class LiveView:
    """The tree, updated in place on stdout (plain lines when stdout is not a terminal)."""

    def __init__(self, state: TreeState) -> None:
        self.console = Console()
        self.live = Live(
            render(state, "following..."), console=self.console, auto_refresh=False, transient=False
        )

    def __enter__(self) -> LiveView:
        self.live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.live.__exit__(*exc)

    def event(self, event: dict[str, Any], state: TreeState) -> None:
        self.live.update(
            render(state, f"{event['type']} (seq {event['seq']})  Ctrl-C stops watching"), refresh=True
        )

    def note(self, text: str) -> None:
        self.live.console.print(Text(text, style="yellow"))

    def done(self, state: TreeState) -> None:
        self.live.update(render(state, f"stream complete: root {state.root.status}"), refresh=True)
