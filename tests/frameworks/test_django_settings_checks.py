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
                                {"QUEUES": ["default", "mail"], "OPTIONS": {"RETRY": 3}})
    assert (code, output.splitlines()[-1]) == (0, "started"), output


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
