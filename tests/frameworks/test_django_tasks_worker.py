"""``django.tasks`` tasks run by a real worker (``wurk.InProcessWorker``) in a project of its
own process, on the harness's Redis: what the task's record says as the worker handles it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.helpers.server import Server

SRC = Path(__file__).resolve().parents[2] / "src"

TASKS = textwrap.dedent("""
    import threading
    import time

    from django_tasks import task

    started = threading.Event()

    @task
    def spin() -> None:
        started.set()
        while True:  # until the shutdown interrupts it
            time.sleep(0.01)
""")

SETUP = textwrap.dedent("""
    import sys
    import django
    from django.conf import settings

    settings.configure(
        INSTALLED_APPS=["django_tasks", "wurk.contrib.django", "app"],
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
        WURK={"REDIS_URL": sys.argv[1], "CLIENT": "default", "CONCURRENCY": 1,
              "FETCH_TIMEOUT": 0.2, "SHUTDOWN_GRACE": 5, "AUTORELOAD": False},
        TASKS={"default": {"BACKEND": "wurk.contrib.django.tasks.WurkBackend"}},
        USE_TZ=True,
    )
    django.setup()
    import wurk

    def say(*values):
        print("=", *values, flush=True)
""")


def run_project(tmp_path: Path, redis_url: str, script: str) -> list[str]:
    """``script`` (after ``SETUP``) in a process of its own beside the ``app`` package; what
    it printed with ``say`` (the worker logs on stdout too), once it exited 0."""
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "__init__.py").write_text("")
    (tmp_path / "app" / "tasks.py").write_text(TASKS)
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), str(tmp_path)])
    env["WURK_HOME"] = str(tmp_path / "home")
    done = subprocess.run([sys.executable, "-c", SETUP + textwrap.dedent(script), redis_url],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return [line[2:] for line in done.stdout.splitlines() if line.startswith("= ")]


def test_a_task_the_shutdown_interrupts_is_ready_again_not_running(
        redis_server: Server, tmp_path: Path) -> None:
    """The shutdown gives the job back to its queue, where it waits to run again: its
    record said RUNNING (no worker runs it) until then. It says READY, as before it ran,
    with the attempt kept (its start, its worker) and no error: it did not fail."""
    lines = run_project(tmp_path, redis_server.url, """
        from app.tasks import spin, started

        result = spin.enqueue()
        worker = wurk.InProcessWorker().start()
        assert started.wait(60)
        say(spin.get_result(result.id).status)
        worker.stop(timeout=0.05)
        read = spin.get_result(result.id)
        say(read.status, len(read.worker_ids), read.started_at is not None, read.errors)
        redis = wurk.default_config().pool("client").client
        say(redis.llen("queue:default"))
    """)
    assert lines == ["RUNNING", "READY 1 True []", "1"]
