"""The Workflows tab: every workflow, and each one's graph drawn with its steps' states.

1. ``extension()``: a built-in ``Extension``. ``GET /workflows/`` lists workflows newest
   first (the ``wurk:workflows`` index), paged, with their state and progress;
   ``GET /workflows/<wid>`` draws the workflow's graph as SVG on the server (no script, no
   library): a box per step, labelled with its name and state and coloured by it, an
   arrow per dependency, left to right; a nested workflow is a box of its own that its
   steps lead into (its steps are named by path, ``outer/inner``); below, a table of the
   steps with their jids, each linked to its stored result.
2. ``layout``: steps in columns by how many steps come before them (the longest path from
   a step that waits for nothing), each column ordered by where its steps' predecessors
   stand. Steps that wait for the same steps and are waited for by the same — a fan-out's
   children, a group of steps — are drawn as one box with their count and a bar of their
   states when there are more than ``GROUP_OVER`` of them: a 1,000-child fan-out is three
   boxes, not a thousand. At most ``NODES_DRAWN`` boxes are drawn; the page says how many
   were left out.
3. What Redis holds is untrusted: each hash is read up to ``wurk.stored.FIELD_CAP`` fields,
   a text is cut before it is shown, a key of the wrong type or a record that is not a
   workflow's answers a sentence saying so (an unknown wid: 404), a cycle in hostile data
   is drawn rather than followed. No read or layout grows with what an attacker wrote
   beyond those caps.
4. ``GET /api/workflows/`` and ``/api/workflows/<wid>``: the same as JSON.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..config import Config
from ..stored import Capped, Invalid, epoch, hash_fields, printable, text
from ..workflow.status import STATES, STEP_STATES
from .api import PAGE, Document, Endpoint
from .batches import page_number
from .context import dashboard
from .extensions import Extension
from .i18n import N_
from .templating import render
from .views import name_of

__all__ = ["GONE", "GROUP_OVER", "NAME", "NODES_DRAWN", "Graph", "extension", "layout",
           "read_workflow"]

NAME = "workflows"
TEMPLATES = Path(__file__).parent / "templates" / NAME
PER_PAGE = 25
GONE = N_("No such workflow: it expired, or never started.")
# More than this many steps alike (same predecessors, same dependants) are one box.
GROUP_OVER = 8
# Boxes drawn at most: a graph larger than this (after grouping) is drawn in part.
NODES_DRAWN = 400
# Dependants of one step read at most, and edges kept at most over the whole graph.
DEPENDANTS_READ = 2_000
EDGES_KEPT = 20_000
# Pairs of steps looked at for arrows, at most: hashes within the read caps can name
# billions (10,000 children each naming 2,000 dependants), a workflow wurk wrote a few.
PAIRS_READ = 200_000
# Levels of nesting (``a[1][2]``) a step is ordered by: hostile names nest hundreds deep.
ORDER_LEVELS = 16
# Steps listed in the table below the graph (groups count as one row).
ROWS_SHOWN = 500
# Characters of a name shown in a box (its whole name, cut at NAME_CHARS, is its tooltip).
LABEL_CHARS = 26
NAME_CHARS = 300
# The boxes' size and spacing, in the view box's units.
BOX_W, BOX_H, GAP_X, GAP_Y, MARGIN = 190, 40, 56, 14, 10
PARTS = ("state", "then", "subs", "jids")  # the hashes a workflow's page reads
_CHILD = re.compile(r"^(.*)\[([0-9]+)\]$")


@dataclass
class Node:
    """A box: one step, or a group of steps alike."""

    key: str
    label: str
    title: str
    state: str  # a step's state, or "group"
    kind: str = "job"  # job, workflow, group
    members: list[str] = field(default_factory=list)
    counts: list[tuple[str, int]] = field(default_factory=list)  # a group's states
    bars: list[tuple[str, float, float]] = field(default_factory=list)  # (state, x, width)
    column: int = 0
    x: float = 0.0
    y: float = 0.0


@dataclass
class Graph:
    nodes: list[Node]
    edges: list[tuple[str, str]]  # an SVG path's d, and the arrow's kind
    width: int
    height: int
    hidden: int  # boxes left out (past NODES_DRAWN)
    steps: int  # steps the state hash holds
    cut: bool  # a hash was read only in part


def _short(name: str, limit: int = LABEL_CHARS) -> str:
    shown = printable(name)
    return shown if len(shown) <= limit else "…" + shown[-(limit - 1):]


def _texts(found: Capped | Invalid, limit: int = 100_000) -> tuple[dict[str, str], bool]:
    if isinstance(found, Invalid):
        return {}, False
    return {text(k)[:NAME_CHARS * 4]: text(v)[:limit] for k, v in found.items.items()}, found.cut


def read_workflow(config: Config, wid: str) -> dict[str, Any] | None:
    """What a workflow's page shows; None when no workflow ``wid`` exists."""
    keys = config.keys
    if not wid or len(wid) > NAME_CHARS:
        return None

    def read(r: Any) -> dict[str, Any]:
        pipe = r.pipeline(transaction=False)
        for part in ("", *PARTS):
            pipe.type(keys.workflow(wid, part))
        types = dict(zip(("", *PARTS), (text(t) for t in pipe.execute()), strict=True))
        if types[""] not in ("hash", "none"):
            return {"wid": wid, "problem": f"its record is a {types['']}, not a hash"}
        record = hash_fields(r, keys.workflow(wid), cap=64)
        if isinstance(record, Invalid) or not record.items:
            return {}
        parts = {part: hash_fields(r, keys.workflow(wid, part)) for part in PARTS}
        wrong = [f"its {part} is a {types[part]}, not a hash" for part in PARTS
                 if types[part] not in ("hash", "none")]
        return {"record": record, "wrong": wrong, **parts}

    found = config.pool("api").run(read, idempotent=True)
    if not found:
        return None
    if "problem" in found:
        return {**found, "wid": printable(wid), "name": ""}
    meta, _ = _texts(found["record"], 1_000)
    states, cut_states = _texts(found["state"], 40)
    then, cut_then = _texts(found["then"])
    subs, cut_subs = _texts(found["subs"])
    jids, _ = _texts(found["jids"], 100)
    problems = found["wrong"]
    graph = layout(states, then, subs)
    graph.cut = graph.cut or cut_states or cut_then or cut_subs
    counts: dict[str, int] = defaultdict(int)
    for name, state in states.items():
        if name not in subs:  # job steps, as the record's total counts them
            counts[state if state in STEP_STATES else "unreadable"] += 1
    rows = []
    for node in graph.nodes[:ROWS_SHOWN]:
        jid = jids.get(node.members[0], "") if node.kind == "job" else ""
        rows.append({"node": node, "jid": printable(jid)})
    state = meta.get("state", "")
    return {"wid": printable(wid), "name": printable(meta.get("name", ""))[:NAME_CHARS],
            "state": state if state in STATES else "unreadable",
            "policy": printable(meta.get("policy", ""))[:20],
            "total": _number(meta.get("total")), "pending": _number(meta.get("pending")),
            "dead": _number(meta.get("dead")), "created_at": _time(meta.get("created_at")),
            "finished_at": _time(meta.get("finished_at")), "graph": graph, "rows": rows,
            "counts": sorted(counts.items()), "problems": problems, "problem": None}


def listing(config: Config, page: int) -> dict[str, Any]:
    keys = config.keys

    def read(r: Any) -> tuple[int | Invalid, list[Any], list[Any]]:
        kind = text(r.type(keys.workflows))
        if kind not in ("zset", "none"):  # a key of the wrong type: said on the page
            return Invalid(raw=kind, expected="a sorted set"), [], []
        size = int(r.zcard(keys.workflows))
        pages = max(1, math.ceil(size / PER_PAGE))
        at = min(max(page, 1), pages)
        members = r.zrevrange(keys.workflows, (at - 1) * PER_PAGE, at * PER_PAGE - 1,
                              withscores=True)
        pipe = r.pipeline(transaction=False)
        usable = []
        for member, _ in members:
            wid = text(member)
            if wid and len(wid) <= NAME_CHARS:
                usable.append(wid)
                pipe.hmget(keys.workflow(wid), "name", "state", "total", "pending",
                           "created_at")
        return size, usable, list(pipe.execute(raise_on_error=False)) if usable else []

    size, wids, records = config.pool("api").run(read, idempotent=True)
    if isinstance(size, Invalid):
        return {"workflows": [], "size": 0, "page": 1, "pages": 1,
                "problem": "The index of workflows is not a sorted set."}
    pages = max(1, math.ceil(size / PER_PAGE))
    rows: list[dict[str, Any]] = []
    for wid, record in zip(wids, records, strict=False):
        if not isinstance(record, list):
            rows.append({"wid": printable(wid), "name": "", "state": "unreadable",
                         "total": None, "pending": None, "created_at": None})
            continue
        name, state, total, pending, created = (text(v)[:1000] if v is not None else None
                                                for v in record)
        rows.append({"wid": printable(wid), "name": printable(name or "")[:NAME_CHARS],
                     "state": (state if state in STATES else
                               "expired" if state is None else "unreadable"),
                     "total": _number(total), "pending": _number(pending),
                     "created_at": _time(created)})
    return {"workflows": rows, "size": size, "page": min(max(page, 1), pages),
            "pages": pages, "problem": None}


def _number(value: str | None) -> int | None:
    if value is None or not (value.isascii() and value.isdigit()) or len(value) > 15:
        return None
    return int(value)


def _time(value: str | None) -> float | None:
    found = epoch(value) if value else None
    return found if isinstance(found, float) and math.isfinite(found) else None


# -- the drawing ------------------------------------------------------------------------------
def layout(states: dict[str, str], then: dict[str, str], subs: dict[str, str]) -> Graph:
    """Boxes and arrows for a workflow's ``state``, ``then`` and ``subs`` hashes."""
    names = set(states)
    parents: dict[str, list[str]] = defaultdict(list)  # step -> its children
    for name in states:
        match = _CHILD.match(name)
        if match and match.group(1) in names:
            parents[match.group(1)].append(name)
    edges: set[tuple[str, str, str]] = set()  # (from, to, kind)
    cut_edges = False

    def pairs() -> Iterator[tuple[str, str, str]]:
        for parent, children in parents.items():
            for child in children:
                yield parent, child, "added"
        for node, dependants in then.items():
            targets = dependants.split()[:DEPENDANTS_READ]
            if node.endswith("[*]"):
                parent = node[:-3]
                sources = parents.get(parent) or [parent]
            else:
                sources = [node]
            for target in targets:
                for source in sources:
                    yield source, target, "dep"
        for sub, info in subs.items():
            for leaf in info.split()[1:DEPENDANTS_READ]:
                yield leaf, sub, "ends"

    for looked, (source, target, kind) in enumerate(pairs()):
        if looked >= PAIRS_READ or len(edges) >= EDGES_KEPT:
            cut_edges = True
            break
        if source in names and target in names and source != target:
            edges.add((source, target, kind))
    preds: dict[str, set[str]] = defaultdict(set)
    succs: dict[str, set[str]] = defaultdict(set)
    for source, target, _ in edges:
        succs[source].add(target)
        preds[target].add(source)

    # Steps alike — the same predecessors and dependants, the same kind — as one box.
    alike: dict[tuple[Any, ...], list[str]] = defaultdict(list)
    for name in sorted(names, key=_order):
        kind = "workflow" if name in subs else "job"
        alike[(kind, frozenset(preds[name]), frozenset(succs[name]))].append(name)
    box_of: dict[str, str] = {}
    boxes: dict[str, Node] = {}
    for (kind, _, _), members in alike.items():
        if len(members) > GROUP_OVER:
            key = f"group:{members[0]}"
            tally: dict[str, int] = defaultdict(int)
            for member in members:
                tally[_state(states[member])] += 1
            first = members[0]
            match = _CHILD.match(first)
            label = (f"{_short(match.group(1), 14)}[*] ×{len(members):,}" if match
                     else f"{_short(first, 16)} …×{len(members):,}")
            boxes[key] = Node(key, label, f"{len(members):,} steps: {printable(first)[:NAME_CHARS]}"
                              f" … {printable(members[-1])[:NAME_CHARS]}", "group", "group",
                              members, sorted(tally.items(), key=lambda kv: _rank(kv[0])))
            for member in members:
                box_of[member] = key
        else:
            for member in members:
                # labelled once drawn: a graph of 10,000 steps labels 400
                boxes[member] = Node(member, "", "", _state(states[member]), kind, [member])
                box_of[member] = member
    links: set[tuple[str, str, str]] = {(box_of[s], box_of[t], kind) for s, t, kind in edges
                                        if box_of[s] != box_of[t]}
    _columns(boxes, links)
    shown = sorted(boxes.values(), key=lambda n: (n.column, _order(n.members[0])))
    hidden = max(0, len(shown) - NODES_DRAWN)
    shown = shown[:NODES_DRAWN]
    _place(shown, links)
    placed = {node.key: node for node in shown}
    # An arrow between neighbouring columns is one curve; a longer one runs below the boxes
    # of the columns it passes (never through a box), then up or down into its target.
    bottoms: dict[int, float] = defaultdict(float)
    for drawn in shown:
        bottoms[drawn.column] = max(bottoms[drawn.column], drawn.y + BOX_H)
    lines: list[tuple[str, str]] = []
    lowest = 0.0
    for source, target, kind in sorted(links):
        a, b = placed.get(source), placed.get(target)
        if a is None or b is None:
            continue
        x1, y1, x2, y2 = a.x + BOX_W, a.y + BOX_H / 2, b.x, b.y + BOX_H / 2
        passed = range(a.column + 1, b.column)
        if not passed:
            lines.append((f"M{x1:.1f},{y1:.1f} C{x1 + 28:.1f},{y1:.1f} {x2 - 28:.1f},{y2:.1f} "
                          f"{x2:.1f},{y2:.1f}", kind))
            continue
        low = max(bottoms[column] for column in passed) + GAP_Y / 2
        lowest = max(lowest, low)
        lines.append((f"M{x1:.1f},{y1:.1f} C{x1 + 24:.1f},{y1:.1f} {x1 + 4:.1f},{low:.1f} "
                      f"{x1 + 28:.1f},{low:.1f} L{x2 - 28:.1f},{low:.1f} C{x2 - 4:.1f},{low:.1f} "
                      f"{x2 - 24:.1f},{y2:.1f} {x2:.1f},{y2:.1f}", kind))
    width = int(max((n.x for n in shown), default=0) + BOX_W + MARGIN)
    height = int(max(max((n.y for n in shown), default=0) + BOX_H, lowest) + MARGIN)
    for box in shown:
        box.bars = _bars(box)
        if box.kind != "group":
            box.label, box.title = _short(box.key), printable(box.key)[:NAME_CHARS]
    return Graph(shown, lines, width, height, hidden, len(states), cut_edges)


def _columns(boxes: dict[str, Node], links: set[tuple[str, str, str]]) -> None:
    """Each box's column: the longest path to it from a box with no predecessor (Kahn's
    order; boxes on a cycle — only hostile data has one — go after the rest)."""
    incoming: dict[str, int] = defaultdict(int)
    following: dict[str, list[str]] = defaultdict(list)
    for source, target, _ in links:
        incoming[target] += 1
        following[source].append(target)
    ready = [key for key in boxes if incoming[key] == 0]
    seen = 0
    while ready:
        key = ready.pop()
        seen += 1
        for target in following[key]:
            boxes[target].column = max(boxes[target].column, boxes[key].column + 1)
            incoming[target] -= 1
            if incoming[target] == 0:
                ready.append(target)
    if seen < len(boxes):
        last = max(node.column for node in boxes.values()) + 1
        for key, count in incoming.items():
            if count > 0 and key in boxes:
                boxes[key].column = max(boxes[key].column, last)


def _place(nodes: list[Node], links: set[tuple[str, str, str]]) -> None:
    """Columns left to right; in each, boxes ordered by their predecessors' mean row."""
    by_column: dict[int, list[Node]] = defaultdict(list)
    for node in nodes:
        by_column[node.column].append(node)
    preds: dict[str, list[str]] = defaultdict(list)
    for source, target, _ in links:
        preds[target].append(source)
    row: dict[str, float] = {}
    for index, column in enumerate(sorted(by_column)):
        members = by_column[column]

        def weight(node: Node) -> float:
            known = [row[p] for p in preds[node.key] if p in row]
            return sum(known) / len(known) if known else math.inf

        members.sort(key=lambda node: (weight(node), _order(node.members[0])))
        for position, node in enumerate(members):
            row[node.key] = position
            node.x = MARGIN + index * (BOX_W + GAP_X)
            node.y = MARGIN + position * (BOX_H + GAP_Y)


def _bars(node: Node) -> list[tuple[str, float, float]]:
    """A group's states as a bar along its box's foot: (state, x, width)."""
    total = sum(count for _, count in node.counts)
    if node.kind != "group" or total == 0:
        return []
    out, at = [], node.x + 6
    for state, count in node.counts:
        width = (BOX_W - 12) * count / total
        out.append((state, at, width))
        at += width
    return out


def _state(value: str) -> str:
    return value if value in STEP_STATES else "unreadable"


def _rank(state: str) -> int:
    return STEP_STATES.index(state) if state in STEP_STATES else len(STEP_STATES)


def _order(name: str) -> tuple[Any, ...]:
    """Children after their parent, in the order they were added."""
    numbers: list[int] = []
    match = _CHILD.match(name)
    while match and len(match.group(2)) < 12 and len(numbers) < ORDER_LEVELS:
        numbers.append(int(match.group(2)))
        name = match.group(1)
        match = _CHILD.match(name)
    return (name, *reversed(numbers))


# -- pages ------------------------------------------------------------------------------------
async def list_page(request: Request) -> Response:
    dash = dashboard(request)
    found = await dash.run(listing, dash.config, page_number(request))
    return render(request, f"{NAME}/list.html", found)


async def workflow_page(request: Request) -> Response:
    dash = dashboard(request)
    found = await dash.run(read_workflow, dash.config, await name_of(request, "workflow"))
    if found is None:
        raise HTTPException(404, GONE)
    return render(request, f"{NAME}/workflow.html", {"w": found, "groups": GROUP_OVER,
                                                     "drawn": NODES_DRAWN})


async def api_workflows(request: Request) -> Response:
    dash = dashboard(request)
    return Document(await dash.run(listing, dash.config, page_number(request)))


async def api_workflow(request: Request) -> Response:
    dash = dashboard(request)
    found = await dash.run(read_workflow, dash.config, request.path_params["wid"])
    if found is None:
        raise HTTPException(404, GONE)
    if found.get("problem"):
        return Document({"wid": found["wid"], "problem": found["problem"]})
    graph: Graph = found.pop("graph")
    found.pop("rows")
    found["steps"] = [{"name": node.members[0] if node.kind != "group" else node.label,
                       "kind": node.kind, "state": node.state,
                       "counts": dict(node.counts), "column": node.column}
                      for node in graph.nodes[:ROWS_SHOWN]]
    found["drawn_in_part"] = graph.hidden > 0 or graph.cut
    return Document(found)


API = (
    Endpoint("GET", "/", api_workflows, "Workflows, newest first, with their state",
             query=(PAGE,), tag=NAME),
    Endpoint("GET", "/{wid}", api_workflow,
             "One workflow: its state and its steps' (groups of alike steps as one)",
             tag=NAME),
)


def extension() -> Extension:
    """The Workflows tab, registered by ``create_app`` on every dashboard."""
    return Extension(name=NAME, tab=N_("Workflows"), templates=TEMPLATES, api=API, routes=[
        Route("/", list_page, methods=["GET"]),
        # A wid "." or "..": the browser would resolve the segment away.
        Route("/-/workflow", workflow_page, methods=["GET"]),
        Route("/{wid}", workflow_page, methods=["GET"]),
    ])

