"""What ``enverif runs watch`` shows: the run tree drawn with ``rich`` and redrawn in place
on every event (one live region at the bottom of the terminal, nothing scrolls), or with
``--json`` one event per line."""

from __future__ import annotations

import json
import sys
from types import TracebackType
from typing import Any, Protocol

from rich.console import Console, Group
from rich.live import Live
from rich.text import Text
from rich.tree import Tree

from app.cli.watch.state import RunNode, TreeState, approval_id


class View(Protocol):
    def __enter__(self) -> View: ...

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...

    def event(self, event: dict[str, Any], state: TreeState) -> None:
        """Show an event just applied to ``state``."""

    def output(self, run_id: str, ended: str | None, state: TreeState) -> None:
        """Show live model output just applied to ``state`` (``ended``: a turn's whole text)."""

    def note(self, text: str) -> None:
        """Say something about the stream itself (a reconnect)."""

    def done(self, state: TreeState) -> None:
        """The stream completed."""


STATUS_STYLES = {
    "QUEUED": "dim",
    "RUNNING": "bold blue",
    "WAITING_APPROVAL": "bold yellow",
    "WAITING_CHILD": "cyan",
    "SUCCEEDED": "bold green",
    "FAILED": "bold red",
    "CANCELLED": "magenta",
}


# The end of a turn's live output drawn under its run.
OUTPUT_TAIL_CHARS = 100


def _label(run: RunNode) -> Text:
    text = Text.assemble((run.agent, "bold"), " ", (run.id, "dim"), " ")
    text.append(run.status, style=STATUS_STYLES.get(run.status, ""))
    if run.step:
        text.append(f"  {run.step}", style="italic")
    if run.output:
        tail = " ".join(run.output.split())[-OUTPUT_TAIL_CHARS:]
        text.append(f"\n  > {tail}", style="dim")
    return text


def render(state: TreeState, footer: str) -> Group:
    children: dict[str | None, list[RunNode]] = {}
    for run in state.runs.values():
        parent = run.parent_id if run.parent_id in state.runs else None
        if run.id != state.root_id:
            children.setdefault(parent or state.root_id, []).append(run)
    pending: dict[str, list[tuple[str, str]]] = {}
    for pending_id, (run_id, tool) in state.approvals.items():
        pending.setdefault(run_id, []).append((pending_id, tool))

    def grow(branch: Tree, run: RunNode) -> None:
        for pending_id, tool in pending.get(run.id, []):
            branch.add(Text.assemble(("approval pending ", "bold yellow"), f"{tool}  ", (pending_id, "dim")))
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
    """The tree, redrawn in place on a terminal. When stdout is not a terminal (a pipe, a
    log file) there is nothing to redraw: one line per event, then the final tree."""

    def __init__(self, state: TreeState) -> None:
        self.console = Console()
        self.plain = not self.console.is_terminal
        self.live = Live(
            render(state, "following..."), console=self.console, auto_refresh=False, transient=False
        )

    def __enter__(self) -> LiveView:
        if not self.plain:
            self.live.__enter__()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if not self.plain:
            self.live.__exit__(kind, exc, tb)

    def event(self, event: dict[str, Any], state: TreeState) -> None:
        if self.plain:
            run = state.runs[event["runId"]]
            kind = event["type"]
            what = run.step if kind.startswith("STEP") else (event.get("status") or "")
            if kind.startswith("APPROVAL"):
                what = f"approval {approval_id(event)}"
            line = f"{event['seq']:>5} {kind:<20} {run.agent} {run.id} {what}".rstrip()
            self.console.print(line, soft_wrap=True, highlight=False)
            return
        footer = f"{event['type']} (seq {event['seq']})  Ctrl-C stops watching"
        self.live.update(render(state, footer), refresh=True)

    def output(self, run_id: str, ended: str | None, state: TreeState) -> None:
        run = state.runs[run_id]
        if self.plain:
            if ended:  # one line per turn: a pipe gets the whole text, not every piece
                self.console.print(
                    f"{'':>5} {'OUTPUT':<20} {run.agent} {run.id} {ended}", soft_wrap=True, highlight=False
                )
            return
        self.live.update(render(state, f"{run.agent} is writing...  Ctrl-C stops watching"), refresh=True)

    def note(self, text: str) -> None:
        self.console.print(Text(text, style="yellow"))

    def done(self, state: TreeState) -> None:
        final = render(state, f"stream complete: root {state.root.status}")
        if self.plain:
            self.console.print(final)
        else:
            self.live.update(final, refresh=True)


class JsonView:
    """One event per line on stdout, flushed: ``enverif runs watch --json | jq``. Notes go to
    stderr, so stdout stays exactly the event log."""

    def __enter__(self) -> JsonView:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        return None

    def event(self, event: dict[str, Any], state: TreeState) -> None:
        print(json.dumps(event, separators=(",", ":")), flush=True)

    def output(self, run_id: str, ended: str | None, state: TreeState) -> None:
        return None  # stdout stays exactly the event log

    def note(self, text: str) -> None:
        print(f"enverif: {text}", file=sys.stderr, flush=True)

    def done(self, state: TreeState) -> None:
        return None
