from __future__ import annotations

import base64
import datetime as dt
import decimal
import enum
import re
import zlib

import pytest
import redis

from wurk import payload as P
from wurk.connections.packing import pack
from wurk.errors import InvalidArguments, InvalidPayload, UnparseablePayload


def test_jid_is_24_lowercase_hex_and_random() -> None:
    jids = {P.new_jid() for _ in range(1000)}
    assert len(jids) == 1000
    assert all(re.fullmatch(r"[0-9a-f]{24}", j) for j in jids)


def test_dumps_is_compact_raw_utf8_and_refuses_nan() -> None:
    assert P.dumps({"a": [1, "é"], "b": None}) == '{"a":[1,"é"],"b":null}'
    with pytest.raises(ValueError):
        P.dumps({"x": float("nan")})


@pytest.mark.parametrize("raw", ["{not json", "", "[1,2]", '"str"', "42", b"\xff\xfe"])
def test_loads_refuses_anything_but_a_json_object(raw: str | bytes) -> None:
    with pytest.raises(UnparseablePayload) as info:
        P.loads(raw)
    assert "payload" in str(info.value)


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("class", 7, "non-empty string"),
        ("class", "", "non-empty string"),
        ("args", {}, "an array"),
        ("args", "1,2", "an array"),
        ("queue", 7, "non-empty string"),
        ("retry", "yes", "true, false or a non-negative integer"),
        ("retry", -1, "true, false or a non-negative integer"),
        ("jid", 12, "a string"),
        ("retry_count", "3", "an integer"),
        ("tags", "a", "an array"),
        ("dead", "no", "true or false"),
    ],
)
def test_validate_names_the_field_its_value_and_what_was_expected(
    field: str, value: object, expected: str
) -> None:
    payload = {"class": "J", "args": [], "queue": "default", "jid": "x" * 24, field: value}
    with pytest.raises(InvalidPayload) as info:
        P.validate(payload)
    assert info.value.field == field
    assert repr(field) in str(info.value) and expected in str(info.value)


def test_validate_reports_a_missing_class() -> None:
    with pytest.raises(InvalidPayload, match="'class' is missing"):
        P.validate({"args": []})


def test_validate_accepts_retry_zero_and_false() -> None:
    for retry in (0, False, True, 25):
        P.validate({"class": "J", "args": [], "retry": retry})


@pytest.mark.parametrize("field", ["retry", "tags", "retry_for", "retry_count", "backtrace",
                                   "dead"])
def test_validate_reads_null_as_an_absent_option(field: str) -> None:
    # Sidekiq's client keeps `set(tags: nil)`, `retry_for: nil`… as JSON null (6.4 checks
    # only truthy tags; 8.x coerces retry_for only when truthy) and its worker reads null as
    # the option unset: wurk runs such a job rather than burying it as invalid.
    payload = {"class": "J", "args": [], "queue": "default", "jid": "x" * 24, field: None}
    assert P.validate(payload) is payload


class Color(enum.Enum):
    RED = 1


@pytest.mark.parametrize(
    ("args", "named"),
    [
        ([(1, 2)], "argument 0 is tuple"),
        ([{1, 2}], "argument 0 is set"),
        ([b"x"], "argument 0 is bytes"),
        ([decimal.Decimal("1.5")], "argument 0 is Decimal"),
        ([1, dt.datetime(2024, 1, 1)], "argument 1 is datetime"),
        ([Color.RED], "argument 0 is Color"),
        ([float("nan")], "argument 0 is nan"),
        ([float("inf")], "argument 0 is inf"),
        ([{"when": dt.date(2024, 1, 1)}], "argument 0['when'] is date"),
        ([[1, [2, object()]]], "argument 0[1][1] is object"),
        ([{1: "a"}], "key 1 of type int"),
    ],
)
def test_check_args_names_the_offending_argument(args: list[object], named: str) -> None:
    with pytest.raises(InvalidArguments) as info:
        P.check_args(args)
    assert named in str(info.value)


def test_check_args_accepts_json_native_values() -> None:
    P.check_args([None, True, 1, 2.5, "s", [1, [2]], {"a": {"b": [None]}}, 2**70])
    P.check_args(["é ✓ 😀", {"clé": ["ü"]}, -(2**3000), 10**600])  # UTF-8; long, not too long


def _nested(levels: int) -> list[object]:
    """A list ``levels`` deep: ``[]`` is one level, ``[[]]`` two."""
    outer: list[object] = []
    inner = outer
    for _ in range(levels - 1):
        inner.append([])
        inner = inner[0]  # type: ignore[assignment]
    return outer


def test_check_args_refuses_arguments_nested_past_what_ruby_reads() -> None:
    # Ruby's JSON reads and writes at most 100 levels; a payload is an object holding the
    # args array, so an argument may nest 98. Deeper, Sidekiq's own client refuses the push
    # (JSON::NestingError) and every worker, Ruby's or wurk's, would bury the job unread.
    deepest = _nested(P.MAX_NESTING - 2)
    P.check_args([deepest])
    assert P.loads(P.dumps({"class": "J", "args": [deepest]}))["args"] == [deepest]
    for args, named in (([_nested(P.MAX_NESTING - 1)], "argument 0" + "[0]" * 98),
                        ([1, {"k": _nested(P.MAX_NESTING - 2)}],
                         "argument 1['k']" + "[0]" * 97)):
        with pytest.raises(InvalidArguments, match="nested deeper than 100 levels") as info:
            P.check_args(args)
        assert str(info.value).startswith(f"{named} is nested too deep")
        with pytest.raises(UnparseablePayload):  # what a worker would have made of it
            P.loads(P.dumps({"class": "J", "args": args}))
    with pytest.raises(InvalidArguments, match="nested too deep"):  # not a RecursionError
        P.check_args([_nested(100_000)])


class Level(enum.IntEnum):
    HIGH = 1


class Shade(str, enum.Enum):
    RED = "red"


class Ratio(float):
    pass


@pytest.mark.parametrize(
    ("args", "named"),
    [
        ([Level.HIGH], "argument 0 is Level"),  # an int to isinstance, not to JSON's reader
        ([[Shade.RED]], "argument 0[0] is Shade"),
        ([Ratio(0.5)], "argument 0 is Ratio"),
        ([{Shade.RED: 1}], "key <Shade.RED: 'red'> of type Shade"),
        (["a\ud800b"], "argument 0 has a lone surrogate ('\\ud800' at index 1)"),
        ([{"k": ["ok", "\udcff"]}], "argument 0['k'][1] has a lone surrogate"),
        ([1, {"\ud800": 1}], "argument 1 has the key '\\ud800', which has a lone surrogate"),
        ([10**5000], "argument 0 is an int of about 5001 digits"),
        ([[-(10**4400)]], "argument 0[0] is an int of about 4401 digits"),
    ],
)
def test_check_args_wants_the_exact_types_and_what_utf8_and_str_can_write(
        args: list[object], named: str) -> None:
    with pytest.raises(InvalidArguments) as info:
        P.check_args(args)
    assert named in str(info.value)


def test_pack_refuses_text_utf8_cannot_carry_as_it_refuses_a_wrong_type() -> None:
    for word in ("a\ud800b", object()):
        with pytest.raises(redis.DataError, match=r"cannot send \('LPUSH',\) to Redis"):
            pack(("LPUSH", "queue:default", word))


def test_write_time_follows_the_format() -> None:
    assert P.write_time("ms", 1700000000.123456) == 1700000000123
    value = P.write_time("float", 1700000000.0)
    assert isinstance(value, float) and P.dumps(value) == "1700000000.0"


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (1700000000.123, 1700000000.123),
        (1700000000123, 1700000000.123),
        (1700000000, 1700000000.0),  # implausible as ms: wurk's defensive read
        ("1700000000.5", 1700000000.5),
        ("1700000000123", 1700000000.123),
        ("2013-07-29 03:26:41 UTC", 1375068401.0),
        ("2013-07-29T03:26:41Z", 1375068401.0),
        ("2013-07-29T05:26:41+02:00", 1375068401.0),
        ("Mon, 29 Jul 2013 03:26:41 +0000", 1375068401.0),
        ("garbage", None),
        (None, None),
        (True, None),
    ],
)
def test_read_time_accepts_every_form(value: object, seconds: float | None) -> None:
    result = P.read_time(value)
    if seconds is None:
        assert result is None
    else:
        assert result == pytest.approx(seconds, abs=1e-6)


def test_score_round_trips_a_double() -> None:
    assert float(P.score(1795974812.4351346)) == 1795974812.4351346
    assert P.score(5) == "5.0"


def test_backtrace_encoding_is_strict_base64_of_zlib_json() -> None:
    lines = ["a.py:1:in `x'", "b.py:2:in `y'"]
    encoded = P.encode_backtrace(lines)
    assert "\n" not in encoded
    assert zlib.decompress(base64.b64decode(encoded)) == b'["a.py:1:in `x\'","b.py:2:in `y\'"]'
    assert P.decode_backtrace(encoded) == lines


def test_backtrace_decoding_accepts_mime_base64_raw_arrays_and_marshal() -> None:
    mime = base64.encodebytes(zlib.compress(b'["x"]')).decode()
    assert P.decode_backtrace(mime) == ["x"]
    assert P.decode_backtrace(["raw", "list"]) == ["raw", "list"]
    marshal = base64.b64encode(zlib.compress(b"\x04\x08[\x06")).decode()
    assert P.decode_backtrace(marshal) is None


def test_error_class_name_is_bare_for_builtins_and_qualified_otherwise() -> None:
    assert P.error_class_name(ValueError()) == "ValueError"
    assert P.error_class_name(InvalidPayload("x")) == "wurk.InvalidPayload"
    assert P.error_class_name(decimal.InvalidOperation()) == "decimal.InvalidOperation"


def test_error_message_is_truncated_and_survives_a_broken_str() -> None:
    assert len(P.error_message(ValueError("x" * 20000))) == 10_000

    class Broken(Exception):
        def __str__(self) -> str:
            raise RuntimeError

    assert "ERROR MESSAGE" in P.error_message(Broken())
