"""docs/encryption.md: a worker whose configuration turns encryption on (``encryption_version``
in its YAML file) needs the active version's key before it starts — without it, ``wurk
worker`` refuses to start, naming the version and where it looked, instead of failing at the
first encrypted push with a bare KeyError."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Callable

import pytest
import redis

import wurk
from tests.system import worker_jobs as jobs
from tests.system.conftest import Worker, wait_for
from wurk import crypto

StartWorker = Callable[..., Worker]
SECRET = "4111-1111-1111-1111-sekret"


@pytest.fixture(autouse=True)
def no_key_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in os.environ if n.startswith("WURK_ENCRYPTION_KEY_")]:
        monkeypatch.delenv(name)


def refused(r: redis.Redis, worker: Worker) -> str:
    """The output of a worker that exited 2 (a configuration error) without registering."""
    assert worker.wait(60) == 2, worker.output()
    assert not r.smembers("processes")
    output = worker.output()
    assert "Traceback" not in output and "KeyError" not in output
    return output


def test_a_worker_with_encryption_on_and_no_key_refuses_to_start(
        config: wurk.Config, r: redis.Redis, start_worker: StartWorker,
        monkeypatch: pytest.MonkeyPatch) -> None:
    output = refused(r, start_worker(settings="encryption_version: 4\n", wait_ready=False))
    assert ("no key for encryption version 4 in the environment (WURK_ENCRYPTION_KEY_4)"
            in output)
    monkeypatch.setenv("WURK_ENCRYPTION_KEY_4", base64.b64encode(b"short").decode())
    output = refused(r, start_worker(settings="encryption_version: 4\n", wait_ready=False))
    assert ("key of encryption version 4 in the environment (WURK_ENCRYPTION_KEY_4) must be "
            "32 bytes" in output)
    # with the key, the same file starts a worker that opens what a keyed pusher sealed
    key = os.urandom(32)
    monkeypatch.setenv("WURK_ENCRYPTION_KEY_4", base64.b64encode(key).decode())
    crypto.enable(active_version=4, config=config)
    jobs.record.set(encrypt=True).perform_async("sys:secret", SECRET)
    start_worker(settings="encryption_version: 4\n")
    wait_for(lambda: r.llen("sys:secret") == 1, message="the encrypted job")
    assert json.loads(r.lindex("sys:secret", 0) or "[]")[0] == SECRET
