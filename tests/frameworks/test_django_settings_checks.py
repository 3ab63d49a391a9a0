"""A bad ``settings.WURK`` or ``TASKS`` option stops Django's startup with an error naming
it (django.md), rather than a worker or a push that misbehaves later. Each case is a fresh
process: Django's settings are configured once per process."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"

SCRIPT = textwrap.dedent("""
    import sys
    import django
    from django.conf import settings

    settings.configure(
        INSTALLED_APPS=["django_tasks", "wurk.contrib.django"],
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
        WURK={**{"REDIS_URL": "redis://127.0.0.1:1/0"}, **%(wurk)r},
        TASKS={"default": {"BACKEND": "wurk.contrib.django.tasks.WurkBackend", **%(tasks)r}},
    )
    try:
        django.setup()
        from django_tasks import task_backends
        task_backends["default"]
    except Exception as exc:
        print(f"{type(exc).__name__}: {exc}")
        sys.exit(1)
    print("started")
""")


def start_django(wurk: dict[str, Any] | None = None,
                 tasks: dict[str, Any] | None = None) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    env["PYTHONPATH"] = str(SRC)
    done = subprocess.run([sys.executable, "-c", SCRIPT % {"wurk": wurk or {},
                                                           "tasks": tasks or {}}],
                          env=env, capture_output=True, text=True, timeout=60)
    return done.returncode, (done.stdout + done.stderr).strip()


def test_good_settings_start() -> None:
    code, output = start_django({"DATABASE": "default", "AUTORELOAD": False},
                                {"QUEUES": ["default", "mail"], "OPTIONS": {
                                    "RETRY": 3, "RETRY_FOR": 60, "RETRY_QUEUE": "low",
                                    "DEAD": False, "BACKTRACE": 5, "TAGS": ["a"],
                                    "LOG_LEVEL": "info", "TIMEOUT": 10, "EXPIRES_IN": 60,
                                    "UNIQUE_FOR": 60, "UNIQUE_UNTIL": "start",
                                    "PARTITION": "p", "PROFILE": "t", "SHARD": "s",
                                    "RESULT_TTL": 60}})
    assert (code, output.splitlines()[-1]) == (0, "started"), output


def test_a_project_without_databases_starts() -> None:
    # Django gives a project without DATABASES a "default" of the dummy backend.
    script = SCRIPT.replace('DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", '
                            '"NAME": ":memory:"}},', "")
    assert script != SCRIPT
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    env["PYTHONPATH"] = str(SRC)
    done = subprocess.run([sys.executable, "-c", script % {"wurk": {"CLIENT": "default"},
                                                           "tasks": {}}],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.stdout.splitlines()[-1:] == ["started"], done.stdout + done.stderr


@pytest.mark.parametrize("value", ["no", 0, None])
def test_autoreload_that_is_not_a_bool_stops_the_startup(value: object) -> None:
    code, output = start_django({"AUTORELOAD": value})
    assert code == 1, output
    assert "ImproperlyConfigured: settings.WURK['AUTORELOAD'] must be True or False" \
        in output, output


@pytest.mark.parametrize("value", ["replica", 5])
def test_a_database_alias_django_does_not_have_stops_the_startup(value: object) -> None:
    code, output = start_django({"DATABASE": value})
    assert code == 1, output
    assert "ImproperlyConfigured: settings.WURK['DATABASE'] must name a database of " \
           f"settings.DATABASES ('default'), not {value!r}" in output, output


@pytest.mark.parametrize("name", ["high priority", "in|flight", "mail,3", ""])
def test_a_queue_name_a_worker_cannot_be_given_stops_the_startup(name: str) -> None:
    # Django's QUEUES take any string; a worker's -q refuses a space, '|' and reads what
    # follows ',' as a weight: tasks of that queue would never run.
    code, output = start_django(tasks={"QUEUES": ["default", name]})
    assert code == 1, output
    assert "ConfigError: TASKS['default']['QUEUES']: " in output, output
    assert repr(name) in output or "empty" in output, output


@pytest.mark.parametrize(("options", "message"), [
    ({"RETRIES": 3}, "unknown option RETRIES; the options are RESULT_TTL and RETRY, "),
    ({"JID": "x" * 24}, "unknown option JID;"),
    ({"QUEUE": "mail"}, "QUEUE is not an option here; a task's queue is its queue_name"),
])
def test_an_option_the_backend_does_not_take_stops_the_startup(
        options: dict[str, object], message: str) -> None:
    # A typo (RETRIES) went into every payload as a field nobody reads; QUEUE and JID were
    # overwritten by the task's own at each enqueue, silently.
    code, output = start_django(tasks={"OPTIONS": options})
    assert code == 1, output
    assert f"ConfigError: TASKS['default']['OPTIONS']: {message}" in output, output


def test_a_task_on_a_queue_a_worker_cannot_be_given_is_refused_at_enqueue() -> None:
    # With QUEUES empty Django lets a task use any queue name: wurk's check is at enqueue.
    script = SCRIPT % {"wurk": {}, "tasks": {"QUEUES": []}} + textwrap.dedent("""
        from django_tasks import task
        from django_tasks.exceptions import InvalidTaskError

        def send(): ...
        send.__module__ = "__main__"
        try:
            task(queue_name="high priority")(send)
        except InvalidTaskError as exc:
            print(f"refused: {exc}")
    """)
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    env["PYTHONPATH"] = str(SRC)
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=60)
    assert "refused: task __main__.send: queue name 'high priority' has a space in it" \
        in done.stdout, done.stdout + done.stderr
