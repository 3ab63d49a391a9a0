"""``wurk.contrib.django.start_worker()``, as a project's ``wsgi.py`` calls it: an embedded
worker with the configuration of ``settings.WURK``, one per process, ``None`` (logged) when it
cannot boot. Each case is a process of its own: Django's settings are configured once."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.helpers.server import Server

SRC = Path(__file__).resolve().parents[2] / "src"

JOBS = textwrap.dedent("""
    import threading

    import wurk

    ran = threading.Event()

    @wurk.job(name="DjangoEmbedded::Mark")
    def mark() -> None:
        ran.set()
""")

WSGI = textwrap.dedent("""
    import json
    import sys
    from django.conf import settings

    settings.configure(
        INSTALLED_APPS=["wurk.contrib.django", "app"],
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
        WURK={"REDIS_URL": sys.argv[1], "CLIENT": "default", "CONCURRENCY": 1,
              "FETCH_TIMEOUT": 0.2, "HEARTBEAT_INTERVAL": 0.2, "TIMEOUT": 1,
              "AUTORELOAD": False, **json.loads(sys.argv[2])},
        ROOT_URLCONF=[],
    )
    # what a project's wsgi.py does
    from django.core.wsgi import get_wsgi_application
    from wurk.contrib.django import start_worker, stop_worker

    application = get_wsgi_application()
    worker = start_worker()

    import wurk

    def say(*values):  # one write: a log line of the worker's thread cannot split it
        sys.stdout.write(" ".join(["=", *map(str, values)]) + "\\n")
        sys.stdout.flush()
""")


def run_wsgi(tmp_path: Path, redis_url: str, script: str,
             wurk: str = "{}") -> tuple[list[str], str]:
    """``script`` after ``WSGI`` in a process of its own beside the ``app`` package (its
    ``jobs.py`` found as ``manage.py wurk`` finds it): what it said, and its whole output."""
    (tmp_path / "app").mkdir(exist_ok=True)
    (tmp_path / "app" / "__init__.py").write_text("")
    (tmp_path / "app" / "jobs.py").write_text(JOBS)
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), str(tmp_path)])
    env["WURK_HOME"] = str(tmp_path / "home")
    done = subprocess.run([sys.executable, "-c", WSGI + textwrap.dedent(script), redis_url,
                           wurk], env=env, capture_output=True, text=True, timeout=120)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    return [line[2:] for line in done.stdout.splitlines() if line.startswith("= ")], output


def test_start_worker_runs_the_projects_jobs_once_per_process(
        redis_server: Server, tmp_path: Path) -> None:
    lines, _ = run_wsgi(tmp_path, redis_server.url, """
        say("app.jobs" in sys.modules)  # found by the start, as manage.py wurk finds it
        from app.jobs import mark, ran

        say(worker is not None and worker.running, worker.config is wurk.default_config())
        say(start_worker() is worker)  # a second call: the same worker
        mark.perform_async()
        say(ran.wait(60))
        redis = wurk.default_config().pool("client").client
        say(redis.scard("processes"))
        stop_worker()
        say(worker.running, redis.scard("processes"))
    """)
    assert lines == ["True", "True True", "True", "True", "1", "False 0"]


def test_a_worker_that_cannot_boot_is_logged_and_none_is_returned(
        redis_server: Server, tmp_path: Path) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        lines, output = run_wsgi(tmp_path, redis_server.url, """
            say(worker)
            redis = wurk.default_config().pool("client").client
            say(redis.scard("processes"))
            stop_worker()  # nothing to stop: fine
        """, wurk=json.dumps({"HEALTH_PORT": port}))
    finally:
        taken.close()
    assert lines == ["None", "0"]
    assert "the embedded worker did not start" in output
    assert "Traceback" in output and f"health_port {port}" in output


def test_it_needs_the_app_installed_and_django_set_up(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    script = textwrap.dedent("""
        import django
        from django.conf import settings
        from django.core.exceptions import ImproperlyConfigured
        from wurk.contrib.django import start_worker

        settings.configure(INSTALLED_APPS=[])
        for step in ("before setup", "after setup"):
            try:
                start_worker()
            except ImproperlyConfigured as exc:
                print(step, exc)
            django.setup()
    """)
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "before setup start_worker() runs once Django is set up: call it after "
        "get_wsgi_application() / get_asgi_application()",
        "after setup start_worker() needs 'wurk.contrib.django' in INSTALLED_APPS"]
