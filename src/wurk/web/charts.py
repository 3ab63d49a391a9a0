"""The history graph, drawn on the server as SVG (no script, no charting library).

``line_chart`` turns series of counts into polyline points in a fixed view box, with a few
round-number grid lines; the template draws them and CSS colours them for light and dark.
``plotted`` draws a day whose stored count cannot be read as 0 (the API gives it as invalid).
The live graph uses the same view box and classes, drawn by ``static/wurk.js``.
``with_marks`` adds vertical lines (deploys) at fractional bucket positions; ``bar_chart``
draws a histogram's buckets as bars.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from ..stored import Invalid

__all__ = ["HEIGHT", "WIDTH", "Bar", "Chart", "bar_chart", "line_chart", "plotted",
           "with_marks"]

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
