"""What ``payload.loads`` refuses, and what it says about it."""

from __future__ import annotations

import pytest

from wurk import payload as P
from wurk.errors import UnparseablePayload
from wurk.retry import MAX_DELAY, default_delay


@pytest.mark.parametrize(("raw", "says"), [
    (b'{"class":"X","args":[NaN]}', "NaN is not JSON"),
    (b'{"class":"X","args":[Infinity]}', "Infinity is not JSON"),
    (b'{"class":"X","args":[-Infinity]}', "-Infinity is not JSON"),
    (b'{"class":"X","args":[1e400]}', "1e400 is beyond any float"),
    (b'{"class":"X","args":[],"failed_at":-1.5E999}', "-1.5E999 is beyond any float"),
    (b'{"class":"X","args":["\\ud800"]}', "lone surrogate"),
    (b'{"class":"X","args":[{"a\\uDC80":1}]}', "lone surrogate"),
    (b'{"class":"X","args":["\\ude00\\ud83d"]}', "lone surrogate"),
    ('{"class":"X","args":[1]}'.encode("utf-16"), "codec can't decode"),
    (b'{"class":"X","args":["\xff"]}', "codec can't decode"),
    (b'{"class":"X","args":[1', "Expecting"),
    (b"[1, 2]", "not an object (list)"),
    ('{"args":' + "[" * 100 + "]" * 100 + "}", "nested deeper than 100 levels"),
    ("[" * 100_000, "nested deeper than 100 levels"),
])
def test_refused_with_the_reason(raw: bytes | str, says: str) -> None:
    with pytest.raises(UnparseablePayload, match="payload is") as caught:
        P.loads(raw)
    assert says in str(caught.value)


def test_escaped_surrogate_pairs_and_backslashes_are_read() -> None:
    assert P.loads(b'{"args":["\\ud83d\\ude00","\\\\ud800"]}')["args"] == [
        "\U0001F600", "\\ud800"]


def test_nesting_up_to_rubys_limit_is_read() -> None:
    deepest = '{"args":' + "[" * 99 + "]" * 99 + "}"  # the object and 99 arrays: 100 levels
    assert P.loads(deepest)["args"] == P.loads(deepest.encode())["args"]
    many = '{"args":[' + ",".join(["[]"] * 500) + "]}"  # many brackets, shallow
    assert len(P.loads(many)["args"]) == 500
    brackets_in_text = '{"args":["' + "[" * 500 + '"]}'
    assert P.loads(brackets_in_text)["args"] == ["[" * 500]


def test_absurd_retry_counts_still_make_a_delay_a_float_can_hold() -> None:
    assert [default_delay(c) for c in range(3)] == [15, 16, 31]
    assert default_delay(10**400) == MAX_DELAY + 15
    assert default_delay(-(10**400)) == MAX_DELAY + 15
    assert float(default_delay(10**400)) < 1e10
