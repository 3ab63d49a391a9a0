"""wurk's JSON (the standard library, through ``wurk.payload``) against orjson and msgspec.

Issue 7 asks whether a faster codec pays on real payloads while keeping Sidekiq's exact
output. This measures, on the entries Ruby Sidekiq 6.4 wrote (``tests/fixtures``: queued,
scheduled, retry and dead jobs with backtraces) and on one payload per size of wurk's own:

1. decode and encode time per payload, median of 7 rounds, and the ratio to the stdlib;
2. whether each codec's encoding is byte for byte what ``wurk.payload.dumps`` writes;
3. whether each decodes what Sidekiq may write as the stdlib does (a Ruby bignum argument,
   NaN refused, deep nesting), and encodes the awkward values as wurk does.

Run: ``.venv/bin/pip install -e '.[bench]' && .venv/bin/python -m benchmarks.json_codecs``.
A codec that is not installed is reported as missing. Never part of the test suite.
"""

from __future__ import annotations

import importlib
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from wurk import payload as P

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures"
ROUNDS = 7


def fixture_payloads() -> list[str]:
    """Every job entry Sidekiq wrote in the golden fixtures, as the stored text."""
    found: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, str) and value.startswith("{") and '"jid"' in value:
            found.append(value)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    for path in sorted(FIXTURES.rglob("*.json")):
        walk(json.loads(path.read_text()))
    return found


def wurk_payloads() -> list[str]:
    """What wurk pushes: no arguments, a few, and a kilobyte of them."""
    base = {"class": "Bench", "queue": "default", "retry": True, "jid": "a" * 24,
            "created_at": 1795971212435, "enqueued_at": 1795971212436}
    return [P.dumps({**base, "args": []}),
            P.dumps({**base, "args": [42, "user@example.com", {"plan": "pro", "seats": 3}]}),
            P.dumps({**base, "args": [{"id": n, "name": f"item {n}", "tags": ["a", "b"]}
                                      for n in range(25)]})]


Codec = tuple[Callable[[bytes], Any], Callable[[Any], bytes]]


def codecs() -> dict[str, Codec | str]:
    """name → (decode, encode), or the reason it is missing."""
    found: dict[str, Codec | str] = {
        "stdlib (wurk)": (P.loads, lambda obj: P.dumps(obj).encode()),
    }
    try:
        orjson = importlib.import_module("orjson")
        found["orjson"] = (orjson.loads, orjson.dumps)
    except ImportError:
        found["orjson"] = "not installed"
    try:
        msgspec_json = importlib.import_module("msgspec.json")
        found["msgspec"] = (msgspec_json.Decoder().decode, msgspec_json.Encoder().encode)
    except ImportError:
        found["msgspec"] = "not installed"
    return found


def per_call(fn: Callable[[Any], Any], items: list[Any]) -> float:
    """Median over rounds of the mean µs per call over ``items`` (repeated to ~20 ms)."""
    repeat = max(1, 2000 // len(items))
    rounds = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        for _ in range(repeat):
            for item in items:
                fn(item)
        rounds.append((time.perf_counter() - start) / (repeat * len(items)) * 1e6)
    return statistics.median(rounds)


EDGE_CASES = {
    "Ruby bignum argument": b'{"class":"A","args":[123456789012345678901234567890],"jid":"x"}',
    "NaN (refused by Ruby)": b'{"class":"A","args":[NaN],"jid":"x"}',
    "101 levels of nesting": b'{"args":' + b"[" * 100 + b"]" * 100 + b"}",
}


def decodes_alike(decode: Callable[[bytes], Any], raw: bytes) -> str:
    try:
        expected: Any = P.loads(raw)
    except Exception as exc:
        expected = type(exc).__name__
    try:
        got: Any = decode(raw)
    except Exception as exc:
        got = type(exc).__name__
    if isinstance(got, str) and isinstance(expected, str):
        return "refuses too"
    if got == expected:
        return "same"
    return "refuses" if isinstance(got, str) else "accepts" if isinstance(expected, str) \
        else "differs"


ENCODE_CASES: dict[str, Any] = {
    "float 1e20": [1e20],
    "float 1.5e-7": [1.5e-7],
    "bignum": [2**100],
    "NaN": [float("nan")],
}


def encodes_alike(encode: Callable[[Any], bytes], value: Any) -> str:
    try:
        expected = P.dumps(value).encode()
    except ValueError:
        expected = b"refused"
    try:
        got = encode(value)
    except Exception:
        got = b"refused"
    return "same" if got == expected else got.decode()


def main() -> None:
    sets = {"Sidekiq fixtures": [p.encode() for p in fixture_payloads()],
            "wurk payloads": [p.encode() for p in wurk_payloads()]}
    print(f"{len(sets['Sidekiq fixtures'])} entries written by Ruby Sidekiq 6.4, "
          f"{len(sets['wurk payloads'])} of wurk's; µs per payload, median of {ROUNDS}")
    baseline: dict[str, tuple[float, float]] = {}
    header = f"{'codec':16}{'set':18}{'decode µs':>10}{'encode µs':>10}{'ratio d/e':>12}" \
             f"{'same bytes':>12}"
    print(header)
    available = codecs()
    for name, codec in available.items():
        if isinstance(codec, str):
            print(f"{name:16}{codec}")
            continue
        decode, encode = codec
        for set_name, raws in sets.items():
            objects = [P.loads(raw) for raw in raws]
            d, e = per_call(decode, raws), per_call(encode, objects)
            baseline.setdefault(set_name, (d, e))
            bd, be = baseline[set_name]
            same = sum(encode(obj) == P.dumps(obj).encode() for obj in objects)
            print(f"{name:16}{set_name:18}{d:10.2f}{e:10.2f}{bd / d:6.1f}×{be / e:4.1f}×"
                  f"{same:>7}/{len(objects)}")
    print("\nDecoding what Sidekiq may store, against the stdlib's answer:")
    for label, raw in EDGE_CASES.items():
        cells = [f"{name}: {decodes_alike(codec[0], raw)}"
                 for name, codec in available.items() if not isinstance(codec, str)]
        print(f"  {label:24}" + "  ".join(cells))
    print("\nEncoding, against wurk's bytes (the stdlib's; Ruby writes 1.0e+20 and 1.5e-07):")
    for label, value in ENCODE_CASES.items():
        cells = [f"{name}: {encodes_alike(codec[1], value)}"
                 for name, codec in available.items() if not isinstance(codec, str)]
        print(f"  {label:24}" + "  ".join(cells))


if __name__ == "__main__":
    main()
