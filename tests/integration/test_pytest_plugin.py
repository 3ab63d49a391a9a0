"""The pytest plugin as a user meets it: a test file of theirs, run by pytest in a fresh
process that loads the plugin from the installed entry point alone."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.helpers.embedded import stop_everything

USER_TESTS = '''
import redis
import wurk
import wurk.testing

done = []

@wurk.job(name="user.resize")
def resize(image_id):
    done.append(image_id)

def test_fake(wurk_fake):
    resize.perform_async(1)
    assert len(resize.jobs) == 1
    assert [j["args"] for j in wurk_fake.jobs()] == [[1]]
    resize.drain()
    assert done == [1]

def test_the_mode_does_not_leak_into_the_next_test():
    assert wurk.testing.mode() == "disable"
    assert wurk.testing.jobs() == []

def test_inline(wurk_inline):
    resize.perform_async(2)
    assert done[-1] == 2

import os
import pytest

@pytest.fixture
def suite_in_fake_mode():
    previous = wurk.testing.set_mode("fake")
    yield
    wurk.testing.set_mode(previous)

def test_redis_is_private_real_and_empty(suite_in_fake_mode, wurk_redis):
    assert os.environ["REDIS_URL"] == wurk_redis.redis_url
    client = redis.Redis.from_url(wurk_redis.redis_url)
    assert client.dbsize() == 0
    jid = resize.perform_async(3)
    assert client.llen("queue:default") == 1
    with wurk.InProcessWorker(wurk_redis):
        for _ in range(200):
            if client.llen("queue:default") == 0 and 3 in done:
                break
            import time; time.sleep(0.05)
    assert 3 in done and jid

def test_redis_was_emptied(wurk_redis, wurk_redis_server):
    client = redis.Redis.from_url(wurk_redis_server.url)
    assert client.llen("queue:default") == 0
'''


def test_the_plugin_loads_from_its_entry_point(tmp_path: Path) -> None:
    (tmp_path / "test_user.py").write_text(textwrap.dedent(USER_TESTS))
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "PYTEST_ADDOPTS")}
    env["WURK_HOME"] = str(tmp_path / "home")
    try:
        result = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_user.py"],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    finally:  # the embedded server its session started stays up, as it would for a user
        stop_everything(tmp_path / "home")
    assert "5 passed" in result.stdout, result.stdout + result.stderr
    assert result.returncode == 0
