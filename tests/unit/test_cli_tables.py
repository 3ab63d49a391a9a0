"""Human formatting of the inspection CLI."""

from __future__ import annotations

import pytest

from wurk.cli import tables


@pytest.mark.parametrize(("seconds", "text"), [
    (0, "0s"), (0.25, "250ms"), (4.26, "4.3s"), (75, "1m 15s"), (3600, "1h 00m"),
    (7385, "2h 03m"), (90000, "1d 1h"), (-30, "30.0s"),
])
def test_duration(seconds: float, text: str) -> None:
    assert tables.duration(seconds) == text


def test_age_past_future_unknown() -> None:
    assert tables.age(100.0, now=160.0) == "1m 00s ago"
    assert tables.age(220.0, now=160.0) == "in 1m 00s"
    assert tables.age(None) == "-"


def test_counts_sizes_plurals() -> None:
    assert tables.count(1234567) == "1,234,567"
    assert [tables.kilobytes(k) for k in (512, 30496, 3 * 1024 * 1024)] == [
        "512 KB", "29.8 MB", "3.00 GB"]
    assert tables.plural(1, "process", "processes") == "1 process"
    assert tables.plural(2, "thread") == "2 threads"


def test_table_aligns_columns_and_cuts_long_cells() -> None:
    text = tables.table(("NAME", "SIZE"), [("default", "1,000"), ("a", "5"),
                                            ("x" * 100, "1")], right=(1,))
    lines = text.splitlines()
    assert lines[0].startswith("NAME") and lines[1].endswith("1,000") and lines[2].endswith("5")
    assert len({len(line) for line in lines}) == 1  # every row as wide as the header
    assert "…" in lines[3] and len(lines[3].split()[0]) == tables.MAX_CELL


def test_newlines_in_a_cell_do_not_break_the_row() -> None:
    assert tables.table(("E",), [("a\nb",)]).splitlines() == ["E", "a b"]
