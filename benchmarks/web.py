"""Dashboard response times with 100,000 entries in the retry set.

    python -m benchmarks.web [--retries 100000] [--requests 200]

Seeds the retry set (plus a few queues, a process and some dead jobs), serves the dashboard
with uvicorn on loopback and times full page loads over one keep-alive connection: the
Dashboard, Retries (first page and a deep page), Queues, and the /stats document the live
stream sends. Prints p50 and p95 per page; the target is p95 < 100 ms.

Uses REDIS_URL when set (its data is flushed!), else starts a private server.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path

import redis

# Members per ZADD and commands per pipeline: seeding 100,000 entries takes about a second.
BATCH = 1000
PIPELINE_COMMANDS = 20
WARMUP_REQUESTS = 5
TARGET_P95_MS = 100.0


def failed_payload(n: int, now: float) -> str:
    """A failed Sidekiq 8 job with a short backtrace, as the retry set holds it."""
    return json.dumps({
        "retry": True, "queue": "default", "class": "Billing::InvoiceJob",
        "args": [n, "customer-4711", {"notify": True}], "jid": secrets.token_hex(12),
        "created_at": int(now * 1000), "enqueued_at": int(now * 1000),
        "failed_at": int(now * 1000), "retry_count": 3, "error_class": "Net::ReadTimeout",
        "error_message": "Net::ReadTimeout with #<TCPSocket:(closed)>",
    }, separators=(",", ":"))


def seed(r: redis.Redis, retries: int) -> None:
    now = time.time()
    r.flushall()
    pipe = r.pipeline(transaction=False)
    for start in range(0, retries, BATCH):
        pipe.zadd("retry", {failed_payload(n, now): now + 60 + n
                            for n in range(start, min(retries, start + BATCH))})
        if len(pipe) >= PIPELINE_COMMANDS:
            pipe.execute()
    pipe.execute()
    for name in ("default", "mailers", "critical"):
        r.lpush(f"queue:{name}", *(failed_payload(n, now) for n in range(100)))
        r.sadd("queues", name)
    r.zadd("dead", {failed_payload(n, now): now - n for n in range(1000)})


def timed(connection: http.client.HTTPConnection, path: str) -> float:
    started = time.perf_counter()
    connection.request("GET", path)
    response = connection.getresponse()
    response.read()
    if response.status != 200:
        raise SystemExit(f"GET {path} answered {response.status}")
    return (time.perf_counter() - started) * 1000


def measure(port: int, path: str, requests: int) -> tuple[float, float]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    for _ in range(WARMUP_REQUESTS):
        timed(connection, path)
    samples = [timed(connection, path) for _ in range(requests)]
    connection.close()
    quantiles = statistics.quantiles(samples, n=100)
    return statistics.median(samples), quantiles[94]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--retries", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.helpers.server import start_server
    from tests.web.live import serve

    server = None
    if not os.environ.get("REDIS_URL"):
        server = start_server(Path(tempfile.mkdtemp(prefix="wurk-bench-")))
        os.environ["REDIS_URL"] = server.url
    try:
        run(args.retries, args.requests, serve)
    finally:
        if server is not None:
            server.stop()


def run(retries: int, requests: int, serve: object) -> None:
    import wurk
    from wurk.web import create_app

    r = redis.Redis.from_url(os.environ["REDIS_URL"])
    seed(r, retries)
    pages = {"Dashboard": "/", "Retries": "/retries",
             "Retries, deep page": f"/retries?page={retries // 50}", "Queues": "/queues",
             "/stats (live stream)": "/stats"}
    config = wurk.configure()
    print(f"{retries:,} retries · {requests} requests per page · web pool of "
          f"{config.web_pool_size} connections")
    ok = True
    with serve(create_app(config)) as live:  # type: ignore[operator]
        for name, path in pages.items():
            p50, p95 = measure(live.port, path, requests)
            ok &= p95 < TARGET_P95_MS
            print(f"  {name:<22} p50 {p50:6.1f} ms   p95 {p95:6.1f} ms")
    print(f"target p95 < {TARGET_P95_MS:.0f} ms: {'met' if ok else 'NOT met'}")
    config.close()


if __name__ == "__main__":
    main()
