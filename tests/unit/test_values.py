"""The checked readers of stored values, the printable text they carry, and host names."""

from __future__ import annotations

import base64
import json
import math
import tracemalloc
import zlib
from typing import Any

import pytest

from wurk import payload as P
from wurk.api import values
from wurk.api.values import Invalid
from wurk.hosts import HostNames, check_host_pattern, host_name, local_location
from wurk.stored import cut, printable


@pytest.mark.parametrize(("value", "expected"), [
    (1700000000, 1700000000.0), (1700000000123, 1700000000.123), ("1700000000.5", 1700000000.5),
    (None, None), (0, 0.0),
])
def test_epoch_reads_times(value: Any, expected: float | None) -> None:
    assert values.epoch(value) == expected


@pytest.mark.parametrize("value", [10**400, -10**400, 1e300, -1.0, float("inf"),
                                   float("nan"), "1e300", "nan", "soon", True, [1], {},
                                   "9" * 5000, 253_402_300_800.0])
def test_epoch_refuses_what_no_clock_shows(value: Any) -> None:
    found = values.epoch(value)
    assert isinstance(found, Invalid) and found.expected == "a time"
    assert len(found.raw) <= values.RAW_LIMIT


@pytest.mark.parametrize(("value", "expected"), [
    (b"12", 12), ("0", 0), (7, 7), (None, 0), (b" 5 ", 5), (2**63 - 1, 2**63 - 1),
])
def test_count_reads_redis_counters(value: Any, expected: int) -> None:
    assert values.count(value) == expected


@pytest.mark.parametrize("value", [b"9" * 400, b"-1", b"1e3", b"\xff", "²", 2**63, -1, True,
                                   1.5, b""])
def test_count_refuses_what_redis_never_counted(value: Any) -> None:
    assert isinstance(values.count(value), Invalid)


def test_integer_and_json_object() -> None:
    assert values.integer(-3) == -3 and values.integer(None) is None
    assert isinstance(values.integer(10**400), Invalid)
    assert isinstance(values.integer("3"), Invalid)
    assert values.json_object(b'{"a": 1}') == {"a": 1} and values.json_object(None) is None
    for bad in (b"[" * 10_000, b"[1]", b"{", b'{"a": NaN}', b"\xff"):
        assert isinstance(values.json_object(bad), Invalid), bad


def test_invalid_raw_text_is_printable_and_cut() -> None:
    found = values.invalid("\x00\n" + "x" * 500, "a time")
    assert found.raw.startswith("\\x00\\n") and found.raw.endswith("…")
    assert len(found.raw) == values.RAW_LIMIT and str(found).startswith("invalid (")
    assert values.invalid(b"\xff" * 1000, "x").raw.startswith("\ufffd")
    assert values.invalid(float("inf"), "x").raw == "inf"


def test_to_json_puts_raw_text_beside_nulls_under_json_pointers() -> None:
    bad = Invalid(raw="1e300", expected="a time")
    document = {"a": bad, "list": [1, bad, float("nan")], "we/ird~": {"x": float("inf")},
                "ok": [True, None, "s", 2**70]}
    clean = values.to_json(document)
    assert clean["a"] is None and clean["list"] == [1, None, None]
    assert clean["invalid"] == {"/a": "1e300", "/list/1": "1e300", "/list/2": "nan",
                                "/we~1ird~0/x": "inf"}
    assert clean["ok"] == [True, None, "s", 2**70]
    json.dumps(clean, allow_nan=False)
    assert values.to_json([bad]) == [None]  # a list has no place for the map: split_invalid
    assert values.split_invalid([bad]) == ([None], {"/0": "1e300"})


def test_valid_total_and_latency() -> None:
    bad = Invalid(raw="x", expected="a count")
    assert values.valid_total([1, bad, 2]) == 3
    assert values.latency(None, 10.0) == 0.0 and values.latency(4.0, 10.0) == 6.0
    assert values.latency(bad, 10.0) is bad


def test_backtrace_reader_caps_inflation_without_allocating_it() -> None:
    packer = zlib.compressobj(9)
    parts = [packer.compress(b'["')] + [packer.compress(b"a" * (1 << 20)) for _ in range(64)]
    bomb = base64.b64encode(b"".join([*parts, packer.compress(b'"]'), packer.flush()])).decode()
    tracemalloc.start()
    found = values.backtrace(bomb)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert isinstance(found, Invalid) and found.expected.startswith("backtrace too large")
    assert peak < 8 << 20  # 64 MiB inflated would be; the cap keeps it near 1 MiB
    deep = base64.b64encode(zlib.compress(b"[" * 200_000 + b"]" * 200_000)).decode()
    assert "nested deeper" in values.backtrace(deep).expected  # type: ignore[union-attr]
    cut_short = base64.b64encode(zlib.compress(b'["a", "b"]')[:-3]).decode()
    assert "cut short" in values.backtrace(cut_short).expected  # type: ignore[union-attr]
    assert values.backtrace(P.encode_backtrace(["a", "b"])) == ["a", "b"]
    assert values.backtrace(["x", 1]) == ["x", "1"] and values.backtrace(None) is None
    assert isinstance(values.backtrace([["nested"]]), Invalid)
    assert P.decode_backtrace(bomb) is None


def test_read_time_never_raises_on_huge_integers() -> None:
    assert P.read_time(10**400) is None and P.read_time(-10**400) is None
    assert not math.isnan(P.read_time(1) or 0.0)


def test_printable_escapes_what_breaks_or_disguises_a_line() -> None:
    assert printable("a\nb\rc\x00d\x1b[2Je\u2028f\u202eg\th") == \
        "a\\nb\\rc\\x00d\\x1b[2Je\\u2028f\\u202eg\th"
    assert printable("ünïcode ✓") == "ünïcode ✓"
    assert cut("abcdef", 4) == "abc…" and cut("abc", 4) == "abc"


@pytest.mark.parametrize(("header", "name"), [
    ("Example.COM:8080", "example.com"), ("[::1]:7433", "[::1]"), ("localhost.", "localhost"),
    ("127.0.0.1", "127.0.0.1"),
])
def test_host_name_of_a_header(header: str, name: str) -> None:
    assert host_name(header) == name


def test_host_names_and_patterns() -> None:
    names = HostNames([".example.com", "10.0.0.5"])
    assert names.allows("a.b.example.com") and names.allows("example.com:1")
    assert names.allows("10.0.0.5:7433") and names.allows(None) and names.allows("[::1]")
    assert not names.allows("notexample.com") and not names.allows("10.0.0.6")
    assert HostNames(["*"]).allows("anything")
    for bad in ("a:80", "http://a", "", "a/b", "a b", "."):
        with pytest.raises(ValueError, match="not a host name"):
            check_host_pattern(bad)


def test_local_location() -> None:
    assert local_location("http://evil:1/x/?a=1", "evil:1") == "/x/?a=1"
    assert local_location("http://other/x", "evil:1") == "http://other/x"
    assert local_location("/x", "evil:1") == "/x"
