"""Two shards, one real ``wurk worker`` serving both (a capsule bound to the second shard in
its YAML file): jobs routed by class and by ``wurk.via``, each run from its shard; then the
dashboard's all-shards view and ``wurk stats --redis-url`` count each."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

import wurk
from tests.helpers.server import Server, start_server
from tests.system import shard_jobs
from tests.system.conftest import FAST_SETTINGS, ROOT, wait_for
from tests.web.conftest import browse
from wurk.cli import run
from wurk.web import create_app

JOBS = 50


@pytest.fixture
def second(tmp_path: Path) -> Iterator[Server]:
    started = start_server(tmp_path / "shard-eu")
    yield started
    started.stop()


def test_one_worker_serves_two_shards_and_every_view_counts_each(
        tmp_path: Path, redis_server: Server, second: Server, r: redis.Redis,
        capsys: pytest.CaptureFixture[str]) -> None:
    settings = tmp_path / "wurk.yml"
    settings.write_text(FAST_SETTINGS + f"""
shards:
  eu: {second.url}
capsules:
  europe:
    shard: eu
    concurrency: 2
    queues: [default]
""")
    log = tmp_path / "worker.log"
    worker = subprocess.Popen(
        [sys.executable, "-m", "wurk", "worker", "-r", "tests.system.shard_jobs",
         "-C", str(settings)], cwd=ROOT, stdout=log.open("w"), stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    eu = redis.Redis.from_url(second.url, decode_responses=True)
    try:
        config = wurk.configure(shards={"eu": second.url})
        shard_jobs.at_home.perform_bulk([[n] for n in range(JOBS)])  # routed by class: home
        shard_jobs.in_europe.perform_bulk([[n] for n in range(JOBS)])  # ... and eu
        with wurk.via("eu"):
            shard_jobs.at_home.perform_async(JOBS)  # via wins: eu
        wait_for(lambda: r.get("ran:home") == str(JOBS) and eu.get("ran:euro") == str(JOBS)
                 and eu.get("ran:home") == "1",
                 message=f"every job run from its shard:\n{log.read_text()}")
        wait_for(lambda: len(r.smembers("processes")) == 1 and len(eu.smembers("processes"))
                 == 1, message="the worker's record on both shards")
        # Counts reach each shard with the next heartbeat.
        wait_for(lambda: r.get("stat:processed") == str(JOBS)
                 and eu.get("stat:processed") == str(JOBS + 1), message="the counts")
        with browse(create_app(config)) as client:
            page = client.get("/shards/").text
        rows = {name: page.split(f'data-shard="{name}"', 1)[1].split("</tr>", 1)[0]
                for name in ("default", "eu", "all")}
        assert f">{JOBS}<" in rows["default"] and f">{JOBS + 1}<" in rows["eu"]
        assert f">{2 * JOBS + 1}<" in rows["all"]
        assert run(["stats", "--json", "--redis-url", redis_server.url,
                    "--redis-url", second.url]) == 0
        found = json.loads(capsys.readouterr().out)
        assert [s["processed"] for s in found["shards"]] == [JOBS, JOBS + 1]
        assert [s["processes"] for s in found["shards"]] == [1, 1]
        assert found["total"]["processed"] == 2 * JOBS + 1
        worker.terminate()
        worker.wait(timeout=30)
        assert not r.smembers("processes") and not eu.smembers("processes")
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(timeout=10)
        eu.close()
