"""Rate limiters under saturated demand from two processes, and what the grants show.

Two processes each run threads that call ``within_limit`` of a window, a bucket and a leaky
limiter as fast as they are let in, for ``seconds`` from a common start (at a bucket
boundary, by Redis's clock). Each grant's time is the one Redis let it in at
(``handle.granted_at``): what is checked is the rule itself, not when a thread got round to
noting it. Then:

- window ``size`` per ``interval``: grants in the run = size × seconds / interval, and no
  sliding interval holds more than ``size``;
- bucket ``size`` per ``interval``: the same total, and no wall-clock interval more than size;
- leaky ``size`` drained per ``interval``: a burst of size, then size / interval per second,
  so size × (1 + seconds / interval) in all, and no sliding interval more than twice size.

Every figure is checked within ``TOLERANCE`` (5 %); the demand stops at the end of the run,
so a leaky bucket's last drip may fall just outside it.

The suite runs a scaled-down variant (``tests/system/test_limiter_rates.py``); the full run
of the issue is a command::

    python -m tests.system.limiter_rates --size 50 --interval 10 --seconds 60
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import redis

import wurk

ROOT = Path(__file__).resolve().parents[2]
TOLERANCE = 0.05
KINDS = ("window", "bucket", "leaky")
THREADS = 4  # per limiter, per process: enough that demand always exceeds the limit
# From the start being told to the loaders to the start itself: their threads must be waiting
# for it, even on a loaded machine.
START_MARGIN = 0.5


def limiter(kind: str, name: str, size: int, interval: float) -> wurk.limiter.Limiter:
    wait = 2 * interval  # longer than any wait a saturated limiter asks for
    if kind == "window":
        return wurk.limiter.window(name, size, interval, wait_timeout=wait)
    if kind == "bucket":
        return wurk.limiter.bucket(name, size, int(interval), wait_timeout=wait)
    return wurk.limiter.leaky(name, size, interval, wait_timeout=wait)


# -- one loading process ----------------------------------------------------------------------
def load(prefix: str, size: int, interval: float, seconds: float) -> None:
    """Say "ready", read the start (epoch s) from stdin, hammer every kind from then for
    ``seconds``, and print each kind's grant times."""
    grants: dict[str, list[float]] = {kind: [] for kind in KINDS}
    print("ready", flush=True)
    start = float(sys.stdin.readline())
    end = start + seconds

    def hammer(kind: str) -> None:
        limit = limiter(kind, f"{prefix}-{kind}", size, interval)
        mine = grants[kind]
        while time.time() < end:
            try:
                with limit.within_limit() as handle:
                    mine.append(handle.granted_at or 0.0)
            except wurk.limiter.OverLimit:
                continue

    threading.Event().wait(max(0.0, start - time.time()))
    threads = [threading.Thread(target=hammer, args=(kind,)) for kind in KINDS
               for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print(json.dumps(grants))


# -- the figures ------------------------------------------------------------------------------
@dataclass
class Figures:
    kind: str
    granted: int
    expected: float
    worst: int  # the most grants in one sliding (bucket: wall-clock) interval
    bound: float  # what the rule allows there

    @property
    def ratio(self) -> float:
        return self.granted / self.expected

    @property
    def ok(self) -> bool:
        return abs(self.ratio - 1) <= TOLERANCE and self.worst <= self.bound * (1 + TOLERANCE)

    def line(self) -> str:
        return (f"{self.kind:7} granted={self.granted} expected={self.expected:.0f} "
                f"ratio={self.ratio:.3f} worst_interval={self.worst} bound={self.bound:.0f} "
                f"{'ok' if self.ok else 'OFF'}")


def sliding_worst(times: list[float], width: float) -> int:
    ordered, worst, left = sorted(times), 0, 0
    for right, at in enumerate(ordered):
        while ordered[left] <= at - width:
            left += 1
        worst = max(worst, right - left + 1)
    return worst


def figures(kind: str, times: list[float], size: int, interval: float, start: float,
            seconds: float) -> Figures:
    inside = [t for t in times if start <= t < start + seconds]
    periods = seconds / interval
    if kind == "window":
        return Figures(kind, len(inside), size * periods, sliding_worst(inside, interval), size)
    if kind == "bucket":
        counts: dict[int, int] = {}
        for at in inside:
            counts[math.floor(at / interval)] = counts.get(math.floor(at / interval), 0) + 1
        return Figures(kind, len(inside), size * periods, max(counts.values(), default=0), size)
    return Figures(kind, len(inside), size * (1 + periods), sliding_worst(inside, interval),
                   2 * size)


# -- the run ----------------------------------------------------------------------------------
def run(url: str, *, size: int, interval: float, seconds: float,
        processes: int = 2) -> list[Figures]:
    """Load every kind from ``processes`` processes; the figures of each kind."""
    client = redis.Redis.from_url(url)
    prefix = f"rates{os.getpid()}-{int(time.time())}"
    env = {**os.environ, "REDIS_URL": url}
    command = [sys.executable, "-m", "tests.system.limiter_rates", "load", "--prefix", prefix,
               "--size", str(size), "--interval", str(interval), "--seconds", str(seconds)]
    loaders = [subprocess.Popen(command, cwd=ROOT, env=env, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True) for _ in range(processes)]
    for loader in loaders:  # every process booted, so the demand starts on time in all
        assert loader.stdout is not None and loader.stdout.readline().strip() == "ready"
    now, micros = client.time()
    start = math.ceil((now + micros / 1e6 + START_MARGIN) / interval) * interval
    grants: dict[str, list[float]] = {kind: [] for kind in KINDS}
    for loader in loaders:
        assert loader.stdin is not None
        loader.stdin.write(f"{start!r}\n")
        loader.stdin.close()
    for loader in loaders:
        out = loader.stdout.read() if loader.stdout else ""
        loader.wait(timeout=start - time.time() + seconds + 60)
        if loader.returncode != 0:
            raise RuntimeError(f"a loading process failed (exit {loader.returncode})")
        for kind, times in json.loads(out).items():
            grants[kind] += times
    client.close()
    return [figures(kind, grants[kind], size, interval, start, seconds) for kind in KINDS]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.system.limiter_rates")
    parser.add_argument("mode", nargs="?", default="run", choices=["run", "load"])
    parser.add_argument("--size", type=int, default=50)
    parser.add_argument("--interval", type=float, default=10.0)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--prefix", default="rates")
    parser.add_argument("--url", default=os.environ.get("REDIS_URL"))
    args = parser.parse_args(argv)
    if args.mode == "load":
        load(args.prefix, args.size, args.interval, args.seconds)
        return 0
    if not args.url:
        parser.error("give --url or set REDIS_URL (a Redis nobody else is loading)")
    results = run(args.url, size=args.size, interval=args.interval, seconds=args.seconds)
    print(f"{args.size} per {args.interval:g} s over {args.seconds:g} s, 2 processes × "
          f"{THREADS} threads per limiter:")
    for result in results:
        print("  " + result.line())
    return 0 if all(result.ok for result in results) else 1


if __name__ == "__main__":
    sys.exit(main())
