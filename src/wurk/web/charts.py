"""The history graph, drawn on the server as SVG (no script, no charting library).

``line_chart`` turns series of counts into polyline points in a fixed view box, with a few
round-number grid lines; the template draws them and CSS colours them for light and dark.
``plotted`` draws a day whose stored count cannot be read as 0 (the API gives it as invalid).
The live graph uses the same view box and classes, drawn by ``static/wurk.js``.
``with_marks`` adds vertical lines (deploys) at fractional bucket positions; ``bar_chart``
draws a histogram's buckets as bars. ``flame_graph`` lays out a profile's call tree
(``wurk.profiling.flame``) as rectangles, the root along the bottom.
"""

from __future__ import annotations

import math
import zlib
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from ..profiling.flame import Node
from ..stored import Invalid

__all__ = ["HEIGHT", "WIDTH", "Bar", "Chart", "FlameChart", "FlameRect", "bar_chart",
           "flame_graph", "line_chart", "plotted", "with_marks"]

# The view box: the SVG scales to its container, so these only fix the aspect ratio.
WIDTH = 600
HEIGHT = 160
PAD = 4  # keeps a line at 0 or at the top from being cut in half by the edge
GRID_LINES = 4
X_LABELS = 6


@dataclass
class Chart:
    width: int = WIDTH
    height: int = HEIGHT
    series: list[tuple[str, str, str]] = field(default_factory=list)  # (class, label, points)
    grid: list[tuple[float, str]] = field(default_factory=list)  # (y, value)
    labels: list[tuple[float, str]] = field(default_factory=list)  # (x, text)
    marks: list[tuple[float, str]] = field(default_factory=list)  # (x, label): deploy lines
    bars: list[Bar] = field(default_factory=list)


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    label: str
    value: int


def plotted(counts: Iterable[int | Invalid]) -> list[int]:
    """The counts to draw: an unreadable one as 0."""
    return [0 if isinstance(count, Invalid) else count for count in counts]


def nice_ceiling(value: float) -> float:
    """The smallest 1, 2 or 5 × 10ⁿ at or above ``value`` (at least 1)."""
    if value <= 1:
        return 1
    magnitude = 10.0 ** math.floor(math.log10(value))
    return float(next(step * magnitude for step in (1, 2, 5, 10) if step * magnitude >= value))


def line_chart(labels: Sequence[str], series: Sequence[tuple[str, str, Sequence[int]]]) -> Chart:
    """Points for each ``(class, label, values)``; all share the x positions of ``labels``."""
    top = nice_ceiling(max((v for _, _, values in series for v in values), default=0))
    chart = Chart()
    step = (WIDTH - 2 * PAD) / max(len(labels) - 1, 1)
    for css, label, values in series:
        points = " ".join(f"{PAD + i * step:.1f},{_y(v, top):.1f}" for i, v in enumerate(values))
        chart.series.append((css, label, points))
    chart.grid = [(_y(top * n / GRID_LINES, top), f"{top * n / GRID_LINES:,.0f}")
                  for n in range(1, GRID_LINES + 1)]
    every = max(1, math.ceil(len(labels) / X_LABELS))
    chart.labels = [(PAD + i * step, text) for i, text in enumerate(labels) if i % every == 0]
    return chart


def _y(value: float, top: float) -> float:
    return HEIGHT - PAD - (HEIGHT - 2 * PAD) * value / top


def with_marks(chart: Chart, count: int, positions: Sequence[tuple[float, str]]) -> Chart:
    """Vertical lines at ``(bucket index, label)``; a fractional index falls between two."""
    step = (WIDTH - 2 * PAD) / max(count - 1, 1)
    chart.marks = [(PAD + index * step, label) for index, label in positions
                   if 0 <= index <= count - 1]
    return chart


def bar_chart(labels: Sequence[str], values: Sequence[int]) -> Chart:
    """One bar per value, all the same width, scaled to a round top."""
    top = nice_ceiling(max(values, default=0))
    chart = Chart()
    slot = (WIDTH - 2 * PAD) / max(len(values), 1)
    width = slot * 0.8
    for index, (label, value) in enumerate(zip(labels, values, strict=True)):
        y = _y(value, top)
        chart.bars.append(Bar(PAD + index * slot + (slot - width) / 2, y, width,
                              HEIGHT - PAD - y, label, value))
    chart.grid = [(_y(top * n / GRID_LINES, top), f"{top * n / GRID_LINES:,.0f}")
                  for n in range(1, GRID_LINES + 1)]
    every = max(1, math.ceil(len(labels) / 13))
    chart.labels = [(PAD + i * slot + slot / 2, text) for i, text in enumerate(labels)
                    if i % every == 0]
    return chart


# -- flame graphs ---------------------------------------------------------------------------------
FLAME_WIDTH = 1200
FLAME_ROW = 18
# A frame narrower than this is not drawn (nor what it called): half a pixel at full width.
FLAME_MIN_WIDTH = 0.5
# Rectangles drawn at most, widest stacks first: a page of a few hundred kilobytes.
FLAME_RECTS = 2000
FLAME_TONES = 6  # colour classes ``f0``…``f5`` in wurk.css, picked by the frame's name
CHAR_WIDTH = 7.0  # of the label font, to cut a label to its frame


@dataclass(frozen=True)
class FlameRect:
    x: float
    y: float
    width: float
    label: str  # what fits inside; the whole name is in ``title``
    title: str
    tone: str


@dataclass
class FlameChart:
    width: int = FLAME_WIDTH
    height: int = FLAME_ROW
    row: int = FLAME_ROW
    rects: list[FlameRect] = field(default_factory=list)
    hidden: int = 0  # frames too narrow to draw or past FLAME_RECTS (not what they called)


def flame_graph(root: Node, unit: str) -> FlameChart:
    """A flame graph of ``root``'s call tree: the root along the bottom, each frame above
    the one that called it, as wide as its share of the total; the widest first, breadth
    first, so the cap leaves out the thinnest and deepest frames."""
    chart = FlameChart()
    total = root.value
    if not total > 0:
        return chart
    placed: list[tuple[Node, float, float, int]] = []
    todo: deque[tuple[Node, float, int]] = deque([(root, 0.0, 0)])
    while todo:
        node, x, depth = todo.popleft()
        width = node.value / total * FLAME_WIDTH
        if width < FLAME_MIN_WIDTH or len(placed) >= FLAME_RECTS:
            chart.hidden += 1
            continue
        placed.append((node, x, width, depth))
        for child in sorted(node.children.values(), key=lambda c: -c.value):
            todo.append((child, x, depth + 1))
            x += child.value / total * FLAME_WIDTH
    chart.height = (max(depth for *_, depth in placed) + 1) * FLAME_ROW
    chart.rects = [FlameRect(x, chart.height - (depth + 1) * FLAME_ROW, width,
                             _label(node.name, width), _flame_title(node, total, unit),
                             "root" if depth == 0 else _tone(node.name))
                   for node, x, width, depth in placed]
    return chart


def _tone(name: str) -> str:
    """The same function is the same colour wherever it appears."""
    return f"f{zlib.crc32(name.encode('utf-8', 'replace')) % FLAME_TONES}"


def _label(name: str, width: float) -> str:
    room = int((width - 6) / CHAR_WIDTH)
    if room < 3:
        return ""
    return name if len(name) <= room else name[:room - 1] + "…"


def _flame_title(node: Node, total: float, unit: str) -> str:
    share = node.value / total * 100
    amount = (f"{node.value * 1000:,.1f} ms" if unit == "seconds" else
              f"{node.value:,.1f} ms" if unit == "milliseconds" else f"{node.value:,.0f} {unit}")
    where = f" · {node.file}" if node.file else ""
    return f"{node.name}{where} — {amount}, {share:.1f} %"
