"""A stored profile read back as one call tree, whoever wrote it, for a flame graph.

Everything here reads what Redis holds, so it trusts nothing: each step has a bound, and
what cannot be read is an ``Unreadable`` naming why, never another exception.

1. ``inflate``: the gzip ``data``, inflated to at most ``DRAW_LIMIT`` bytes (a stored value
   can be a zip bomb).
2. ``parse``: speedscope's file format (wurk writes it: pyinstrument's ``evented`` profiles;
   ``sampled`` ones are read too) or the Firefox Profiler's processed format (Ruby's Vernier
   writes it: samples → stack table → frame table → function table → string table, the
   strings per thread or shared), into a ``Flame``: a tree of ``Node`` (name, file, value)
   whose values add up the time (or samples) spent in each stack.
3. Bounds: at most ``MAX_NODES`` distinct stacks, ``MAX_DEPTH`` frames deep,
   ``MAX_STEPS`` events or samples and ``MAX_FRAMES`` frames in all (a sample's stack is
   read up to ``MAX_DEPTH`` frames deep, so ``MAX_STEPS`` alone would allow hundreds of
   millions) are read; a profile past one is drawn as far as it was read and says so
   (``Flame.cut``).
4. Cost: time is added to the innermost frame's node only (``Node.own``) and the tree's
   totals are summed once at the end (``Flame.settle``), so an event or a sample costs the
   same however deep its stack: an evented profile keeps the nodes of its open frames, a
   Firefox one the node of each stack it has met.
"""

from __future__ import annotations

import json
import math
import zlib
from dataclasses import dataclass, field
from typing import Any

__all__ = ["DRAW_LIMIT", "MAX_DEPTH", "MAX_FRAMES", "MAX_NODES", "MAX_STEPS", "Flame",
           "Node", "TooLarge", "Unreadable", "inflate", "parse"]

# Inflated JSON drawn at most: a page parses it in its request, and parsed JSON takes ~8×
# its text in memory. Larger profiles are downloaded and opened in a viewer.
DRAW_LIMIT = 8 * 1024 * 1024
MAX_NODES = 100_000
MAX_DEPTH = 256
MAX_STEPS = 2_000_000
# Frames read in all, over every stack walked and added: a few seconds of a page's time (a
# hostile profile of two million samples of a stack 256 deep would take minutes).
MAX_FRAMES = 5_000_000
GZIP_MAGIC = b"\x1f\x8b"


class Unreadable(Exception):
    """A stored profile that cannot be drawn; the message says why, in fixed words."""


class TooLarge(Unreadable):
    """A stored profile whose JSON is over the limit ``inflate`` was given."""


@dataclass
class Node:
    name: str
    file: str = ""
    value: float = 0.0  # this frame and what it called (``Flame.settle`` sums it)
    children: dict[tuple[str, str], Node] = field(default_factory=dict)
    own: float = 0.0  # spent with this frame innermost

    def child(self, name: str, file: str) -> Node:
        found = self.children.get((name, file))
        if found is None:
            found = self.children[(name, file)] = Node(name, file)
        return found


@dataclass
class Flame:
    """The call tree of one profile: ``root.value`` is the total."""

    root: Node
    kind: str  # "speedscope" or "firefox"
    unit: str  # "seconds", "milliseconds", "samples"…
    title: str = ""
    cut: bool = False
    nodes: int = 0
    frames: int = 0  # frames read so far (``MAX_FRAMES`` at most)

    @property
    def full(self) -> bool:
        """Whether ``MAX_FRAMES`` are read: the rest of the profile is not."""
        return self.frames >= MAX_FRAMES

    def add(self, stack: list[tuple[str, str]], value: float) -> None:
        """``value`` spent in ``stack`` (outermost frame first)."""
        self.spend(self.leaf(stack), value)

    def leaf(self, stack: list[tuple[str, str]]) -> Node:
        """The node of ``stack``'s innermost frame, grown as far as the bounds allow (the
        deepest node reached where one stops it, and ``cut`` says so)."""
        self.frames += min(len(stack), MAX_DEPTH)
        node = self.root
        for depth, frame in enumerate(stack):
            child = self.step(node, frame, depth)
            if child is node:
                break
            node = child
        return node

    def step(self, node: Node, frame: tuple[str, str], depth: int) -> Node:
        """The child ``frame`` of ``node``, at ``depth`` (the root's children are at 0);
        ``node`` itself where ``MAX_DEPTH`` or ``MAX_NODES`` stops the tree (``cut``)."""
        if depth >= MAX_DEPTH:
            self.cut = True
            return node
        found = node.children.get(frame)
        if found is None:
            if self.nodes >= MAX_NODES:
                self.cut = True
                return node
            self.nodes += 1
            found = node.children[frame] = Node(*frame)
        return found

    @staticmethod
    def spend(node: Node, value: float) -> None:
        """``value`` spent with ``node``'s frame innermost (nothing for no finite time)."""
        if math.isfinite(value) and value > 0:
            node.own += value

    def settle(self) -> None:
        """Each node's ``value``: its own time and its callees' (one pass, no recursion)."""
        order, at = [self.root], 0
        while at < len(order):
            order.extend(order[at].children.values())
            at += 1
        for node in reversed(order):
            node.value = node.own + sum(child.value for child in node.children.values())


def inflate(data: bytes, limit: int = DRAW_LIMIT) -> bytes:
    """The JSON text inside gzip ``data``; ``Unreadable`` past ``limit`` bytes or if broken."""
    if not data.startswith(GZIP_MAGIC):
        raise Unreadable("the stored data is not gzip")
    inflater = zlib.decompressobj(wbits=31)
    try:
        text = inflater.decompress(data, limit + 1)
    except zlib.error:
        raise Unreadable("the stored gzip is damaged") from None
    if len(text) <= limit and not inflater.eof:  # cut short
        raise Unreadable("the stored gzip is damaged")
    if len(text) > limit:
        raise TooLarge(f"the profile is over {limit // (1024 * 1024)} MB of JSON: too "
                       "large to draw here")
    return text


def parse(data: bytes) -> Flame:
    """The call tree of a stored profile (gzip JSON of either format)."""
    try:
        document = json.loads(inflate(data), parse_constant=_no_constant)
    except (ValueError, RecursionError):
        raise Unreadable("the stored profile is not JSON") from None
    if isinstance(document, dict) and isinstance(document.get("shared"), dict) \
            and isinstance(document.get("profiles"), list):
        flame = from_speedscope(document)
    elif isinstance(document, dict) and isinstance(document.get("threads"), list):
        flame = from_firefox(document)
    else:
        raise Unreadable("the stored profile is neither speedscope's format nor the "
                         "Firefox Profiler's")
    flame.settle()
    return flame


# -- speedscope ---------------------------------------------------------------------------------
def from_speedscope(document: dict[str, Any]) -> Flame:
    frames = _frames(_list(document["shared"].get("frames")))
    profiles = [p for p in document["profiles"] if isinstance(p, dict)]
    unit = _text(profiles[0].get("unit")) if profiles else ""
    flame = Flame(Node("all"), "speedscope", unit or "seconds",
                  title=_text(document.get("name")))
    steps = 0
    for profile in profiles:
        if profile.get("type") == "sampled":
            steps = _sampled(flame, profile, frames, steps)
        elif profile.get("type") == "evented":
            steps = _evented(flame, profile, frames, steps)
    return flame


def _frames(raw: list[Any]) -> list[tuple[str, str]]:
    found = []
    for frame in raw:
        frame = frame if isinstance(frame, dict) else {}
        file = _text(frame.get("file"))
        line = frame.get("line")
        if file and isinstance(line, int) and not isinstance(line, bool):
            file = f"{file}:{line}"
        found.append((_text(frame.get("name")) or "?", file))
    return found


def _sampled(flame: Flame, profile: dict[str, Any], frames: list[tuple[str, str]],
             steps: int) -> int:
    samples = _list(profile.get("samples"))
    weights = _list(profile.get("weights"))
    for index, sample in enumerate(samples):
        steps += 1
        if steps > MAX_STEPS or flame.full:
            flame.cut = True
            break
        weight = _number(weights[index]) if index < len(weights) else 1.0
        stack = [frames[i] for i in _list(sample) if _index(i, frames)]
        flame.add(stack, weight)
    return steps


def _evented(flame: Flame, profile: dict[str, Any], frames: list[tuple[str, str]],
             steps: int) -> int:
    """Open and close events: the time between two events is spent in the stack then
    open. A close that is not of the innermost open frame closes down to it (or is
    ignored when that frame is not open). Each event costs the same however deep the
    stack is: the open frames are kept as they are added (``opened``), and where each
    frame is open (``at_depths``), so neither is searched or copied."""
    at_depths: dict[int, list[int]] = {}  # frame → the depths it is open at, innermost last
    opened: list[int] = []  # the open frames' indices, outermost first
    # each open frame's node, and whether the tree still grows below it (no bound stopped it)
    path: list[tuple[Node, bool]] = []
    last: float | None = None
    for event in _list(profile.get("events")):
        steps += 1
        if steps > MAX_STEPS or flame.full:
            flame.cut = True
            break
        if not isinstance(event, dict) or not _index(event.get("frame"), frames):
            continue
        at = _number(event.get("at"), missing=math.nan, other=math.nan)
        if math.isnan(at):  # no time, or not a number: the event says nothing
            continue
        if last is not None and path and at > last:
            flame.spend(path[-1][0], at - last)
        last = at if last is None else max(last, at)
        frame = event["frame"]
        if event.get("type") == "O":
            at_depths.setdefault(frame, []).append(len(opened))
            opened.append(frame)
            parent, grows = path[-1] if path else (flame.root, True)
            child = flame.step(parent, frames[frame], len(path)) if grows else parent
            path.append((child, child is not parent))
            flame.frames += 1
        elif event.get("type") == "C" and at_depths.get(frame):
            depth = at_depths[frame][-1]
            for closed in opened[depth:]:  # each open frame is closed once: no search
                at_depths[closed].pop()
            del opened[depth:], path[depth:]
    return steps


# -- Firefox processed format -----------------------------------------------------------------
def from_firefox(document: dict[str, Any]) -> Flame:
    meta, shared = _table(document.get("meta")), _table(document.get("shared"))
    shared_strings = _list(shared.get("stringArray"))
    flame = Flame(Node("all"), "firefox", "samples", title=_text(meta.get("product")))
    steps = 0
    for thread in document["threads"]:
        if isinstance(thread, dict):
            strings = _list(thread.get("stringArray")) or shared_strings
            steps = _thread(flame, thread, strings, steps)
    return flame


def _thread(flame: Flame, thread: dict[str, Any], strings: list[Any], steps: int) -> int:
    samples = _table(thread.get("samples"))
    stacks, frames, funcs = (_table(thread.get(name)) for name in
                             ("stackTable", "frameTable", "funcTable"))
    prefix, frame_of = _list(stacks.get("prefix")), _list(stacks.get("frame"))
    func_of = _list(frames.get("func"))
    names, files = _list(funcs.get("name")), _list(funcs.get("fileName"))
    weights = _list(samples.get("weight"))
    leaves: dict[int, Node] = {}  # a stack's innermost node, found once per stack

    def label(func: Any) -> tuple[str, str]:
        if not _index(func, names):
            return "?", ""
        file = files[func] if _index(func, files) else None
        return _string(strings, names[func]) or "?", _string(strings, file)

    def walk(stack: int) -> Node:
        """The node of ``stack``'s innermost frame: its prefixes walked to the outermost,
        at most ``MAX_DEPTH`` of them (a longer chain, or a cycle, is cut at the
        innermost ``MAX_DEPTH``, and ``cut`` says so)."""
        found: list[tuple[str, str]] = []
        at: Any = stack
        while _index(at, frame_of) and len(found) < MAX_DEPTH:
            frame = frame_of[at]
            found.append(label(func_of[frame]) if _index(frame, func_of) else ("?", ""))
            at = prefix[at] if _index(at, prefix) else None
        if _index(at, frame_of):
            flame.cut = True
        found.reverse()
        leaves[stack] = node = flame.leaf(found)
        return node

    for index, stack in enumerate(_list(samples.get("stack"))):
        steps += 1
        if steps > MAX_STEPS or flame.full:
            flame.cut = True
            break
        if isinstance(stack, int) and not isinstance(stack, bool):
            weight = _number(weights[index]) if index < len(weights) else 1.0
            flame.spend(leaves.get(stack) or walk(stack), weight)
    return steps


# -- checked reads ----------------------------------------------------------------------------
def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")  # NaN, Infinity: no other JSON reader takes them


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _table(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _index(value: Any, into: list[Any]) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < len(into)


def _number(value: Any, missing: float = 1.0, other: float = 0.0) -> float:
    """A finite number; ``missing`` for null (a sample without a weight counts once);
    ``other`` for anything else (by default 0: nothing is added for it)."""
    if value is None:
        return missing
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return other
    try:
        number = float(value)
    except OverflowError:  # an integer of hundreds of digits
        return other
    return number if math.isfinite(number) else other


def _string(strings: list[Any], index: Any) -> str:
    return _text(strings[index]) if _index(index, strings) else ""
