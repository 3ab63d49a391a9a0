"""README's promise, the Ruby half: Sidekiq 6.4's own dashboard (``Sidekiq::Web``) renders
every one of its pages over a Redis holding what each wurk feature writes — plain, scheduled,
retrying and dead jobs in both timestamp formats, batches, unique, expiring, rate-limited,
periodic, partitioned, workflow, result-keeping, iterable, encrypted, profiled and tagged
jobs, a running async job, a paused queue, an in-process worker's and a swarm's process
records — and shows the jobs a Ruby user expects there. The pages are rendered in-process by
``ruby/web_pages.rb`` (Rack::MockRequest); a Ruby exception or a 500 is a wurk defect.
"""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import redis

import wurk
from tests.helpers.faults import wait_until
from tests.helpers.ruby import RUBY, Processes, sidekiq_missing
from tests.interop import web_jobs as J
from wurk.api import PeriodicSet, Queue
from wurk.workflow import Workflow

_MISSING = sidekiq_missing()
pytestmark = pytest.mark.skipif(
    _MISSING is not None,
    reason=f"SKIPPED, NOT RUN: Sidekiq 6.4's dashboard over wurk's data — {_MISSING}")

KEY = bytes(range(32))
SWARM_SETTINGS = """\
heartbeat_interval: 0.5
fetch_timeout: 0.5
timeout: 1
swarm:
  count: 2
"""


def render() -> dict[str, dict[str, Any]]:
    done = subprocess.run(["ruby", str(RUBY / "web_pages.rb")], capture_output=True, text=True,
                          timeout=120, cwd=RUBY, env=os.environ.copy())
    assert done.returncode == 0, done.stderr
    pages: dict[str, dict[str, Any]] = json.loads(done.stdout)
    if os.environ.get("DUMP_PAGES"):  # a file to keep the rendered pages in, to read them
        Path(os.environ["DUMP_PAGES"]).write_text(done.stdout)
    return pages


def shown(page: str) -> str:
    """A page's text as a reader sees it: no scripts, no tags, entities read, spaces folded."""
    page = re.sub(r"<script.*?</script>", " ", page, flags=re.S)
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", page)))


def fill(other: wurk.Config) -> dict[str, str]:
    """Pushes, to queues no worker serves, what each feature writes; the jids by name."""
    jids: dict[str, str] = {}
    hour = time.time() + 3600
    jids["plain"] = J.record.set(queue="waiting").perform_async(1, "two")
    jids["plain_other"] = str(wurk.Client(other).push(
        {"class": "RubyWeb::Record", "queue": "waiting", "args": ["other format"]}))
    jids["scheduled"] = J.record.set(queue="waiting").perform_at(hour, "later")
    jids["scheduled_other"] = str(wurk.Client(other).push(
        {"class": "RubyWeb::Record", "queue": "waiting", "args": ["later other"], "at": hour}))
    jids["tagged"] = J.record.set(queue="waiting", tags=["alpha", "beta"]).perform_async(3)
    jids["unique"] = str(J.record.set(queue="waiting", unique_for=600).perform_async(4))
    jids["expiring"] = J.record.set(queue="waiting", expires_in=600).perform_async(5)
    jids["expiring_later"] = J.record.set(queue="waiting", expires_in=600).perform_in(60, 6)
    jids["result"] = str(J.result.set(queue="waiting").perform_async(1, 2))
    jids["secret"] = J.secret.set(queue="waiting").perform_async(9, {"number": "4111"})
    jids["profile"] = J.profiled.set(queue="waiting", profile="web-prof").perform_async(10)
    batch = wurk.Batch(description="web batch", tags=["batch-tag"])
    with batch.jobs():
        jids["batched"] = J.record.set(queue="waiting").perform_async("in batch")
        jids["batched_later"] = J.record.set(queue="waiting").perform_in(600, "later batch")
    jids["partitioned"] = J.record.set(queue="parted", partition=42).perform_async(7)
    jids["paused"] = J.record.set(queue="paused").perform_async(8)
    Queue("paused").pause()
    flow = Workflow("web flow")
    first = flow.step(J.step.set(queue="waiting"), 1)
    flow.step(J.step.set(queue="waiting"), first)
    jids["workflow"] = flow.start()
    return jids


def run_features() -> dict[str, str]:
    """Pushes what the in-process worker runs: failures into Retries (also batched, tagged,
    encrypted, iterable with state kept), deaths into Dead, a result kept, a profiled run, a
    rate-limited job rescheduled and a slow async job it is still running."""
    jids: dict[str, str] = {}
    jids["fail"] = J.fail.perform_async(1, {"k": "v"})
    jids["fail_tagged"] = J.fail.set(tags=["red"]).perform_async(2)
    batch = wurk.Batch(description="failing batch")
    with batch.jobs():
        jids["fail_batched"] = J.fail.perform_async(3)
    jids["die"] = J.die.perform_async(4)
    jids["flaky"] = J.flaky.perform_async(9)
    done = Workflow("web flow run")
    done.step(J.step, done.step(J.step, 1))
    jids["workflow_run"] = done.start()
    jids["secret_fail"] = J.secret.perform_async(5, {"number": "4111"})
    jids["export"] = J.Export.perform_async(6)
    jids["result_run"] = str(J.result.perform_async(2, 3))
    jids["profiled_run"] = J.profiled.set(profile="web-prof").perform_async(1000)
    with J.WINDOW.within_limit():  # the window's one use: the job's own is over the limit
        pass
    jids["limited"] = J.limited.perform_async(7)
    jids["slow"] = J.slow_async.perform_async(60)
    jids["parted_run"] = J.record.set(queue="parted", partition="p1").perform_async(8)
    return jids


@pytest.mark.parametrize("fmt", ["ms", "float"])
def test_every_page_of_sidekiqs_dashboard_renders_what_each_wurk_feature_wrote(
    fmt: str, r: redis.Redis, redis_server: Any, processes: Processes, tmp_path: Path
) -> None:
    other_fmt = "float" if fmt == "ms" else "ms"
    swarm_yml = tmp_path / "swarm.yml"
    swarm_yml.write_text(SWARM_SETTINGS + f"timestamp_format: {fmt}\n")
    swarm = processes.start("swarm", [sys.executable, "-m", "wurk",
                                      "swarm", "-r", "tests.interop.web_jobs", "-q", "swarmq",
                                      "-g", "swarm", "-C", str(swarm_yml)])
    config = wurk.configure(
        redis_url=redis_server.url, timestamp_format=fmt, queues=["default", "parted"],
        partitions={"parted": 2}, concurrency=4, heartbeat_interval=0.5,
        poll_interval_average=0.2, scheduler_initial_wait=0, fetch_timeout=0.5, timeout=1,
        tag="embedded", encryption_version=1, encryption_keys=lambda version: KEY)
    other = wurk.Config(redis_url=redis_server.url, timestamp_format=other_fmt)
    loop = config.periodic.register("0 0 1 1 *", J.record, args=["tick"], queue="waiting")
    worker = wurk.InProcessWorker(config).start()
    try:
        jids = fill(other)
        jids.update(run_features())
        wait_until(lambda: r.exists(f"loops:{loop.lid}") == 1, 10, "the periodic loop")
        jids["tick"] = str(PeriodicSet().enqueue_now(loop.lid))
        wait_until(lambda: r.zcard("retry") >= 6 and r.zcard("dead") >= 1
                   and r.llen(J.STARTED) == 1 and r.zcard("profiles") >= 1
                   and r.scard("processes") == 3, 30, "the features' writes")
        wait_until(lambda: all(r.hget(p, "busy") is not None for p in r.smembers("processes"))
                   and any(r.hget(p, "busy") == "1" for p in r.smembers("processes")), 10,
                   "the heartbeats")
        assert swarm.poll() is None, processes.output("swarm")
        pages = render()
    finally:
        worker.stop(timeout=1)
        other.close()
    broken = {path: page.get("error") or page["status"] for path, page in pages.items()
              if page.get("status") != 200}
    assert broken == {}
    body = {path: shown(page["body"]) for path, page in pages.items()}
    for path in ("/queues/waiting", "/queues/paused"):
        assert path in body
    waiting = body["/queues/waiting"]
    assert "Current jobs in waiting" in waiting and jids["workflow"].startswith("wf-")
    for expected in ('1, "two"', '"other format"', '"in batch"', '"tick"', "RubyWeb::Result",
                  "RubyWeb::Profiled", "RubyWeb::Step", "alpha", "beta", "[encrypted data]"):
        assert expected in waiting, expected
    assert "4111" not in waiting  # the encrypted argument stays sealed
    assert "RubyWeb::Record" in body["/queues/paused"]
    scheduled = body["/scheduled"]
    for expected in ('"later"', '"later other"', '"later batch"', "RubyWeb::Limited"):
        assert expected in scheduled, expected
    retries = body["/retries"]
    for text in ("RubyWeb::Fail", "RubyWeb::Export", "RubyWeb::Secret", "ValueError", "red",
                 "RubyWeb::Flaky"):
        assert text in retries, text
    assert "RubyWeb::Die" in body["/morgue"] and "RuntimeError: web death" in body["/morgue"]
    (flaky,) = [page for path, page in body.items()
                if path.startswith("/retries/") and "RubyWeb::Flaky" in page]
    assert "web_jobs.py" in flaky  # the backtrace wurk stored, uncompressed by Ruby
    busy = body["/busy"]
    assert jids["slow"] in busy and "RubyWeb::SlowAsync" in busy
    assert busy.count("swarmq") == 2 and "embedded" in busy
    stats = json.loads(pages["/stats"]["body"])
    assert stats["sidekiq"]["retries"] >= 5 and stats["sidekiq"]["dead"] >= 1
    queues = json.loads(pages["/stats/queues"]["body"])
    assert {"waiting", "paused", "default"} <= set(queues)
    details = [path for path in pages if path.count("/") == 2 and not path.startswith(
        ("/queues/", "/stats/"))]
    assert len(details) == r.zcard("retry") + r.zcard("schedule") + r.zcard("dead") >= 12
