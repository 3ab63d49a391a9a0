"""``django.tasks`` under wurk's testing modes: fake and inline never talk to Redis
(testing.md, "Redis keys: none in fake and inline mode"), so a task's result record is kept
in memory there, and its result reads as the task left it. The project runs in a fresh
process, with a Redis URL nothing answers at."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"

TASKS = textwrap.dedent("""
    from django_tasks import task

    @task
    def add(a: int, b: int) -> int:
        return a + b

    @task
    def fail() -> None:
        raise ValueError("no")
""")

SCRIPT = textwrap.dedent("""
    import django
    from django.conf import settings

    settings.configure(
        INSTALLED_APPS=["django_tasks", "wurk.contrib.django", "app"],
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
        WURK={"REDIS_URL": "redis://127.0.0.1:1/0", "SOCKET_TIMEOUT": 0.5},
        TASKS={"default": {"BACKEND": "wurk.contrib.django.tasks.WurkBackend"}},
    )
    django.setup()
    import wurk.testing
    from app.tasks import add, fail

    with wurk.testing.fake():
        result = add.enqueue(2, 3)
        (job,) = wurk.testing.jobs()
        assert job["jid"] == result.id and job["args"] == [[2, 3], {}], job
        assert str(add.get_result(result.id).status) == "READY"
        assert wurk.testing.drain_all() == 1
        result.refresh()
        assert (str(result.status), result.return_value) == ("SUCCESSFUL", 5), result
        failed = fail.enqueue()
        try:
            wurk.testing.drain_all()
        except ValueError:
            pass
        failed.refresh()
        assert [e.exception_class_path for e in failed.errors] == ["builtins.ValueError"]
    print("fake: ok")

    with wurk.testing.inline():
        result = add.enqueue(4, 5)
        assert (str(add.get_result(result.id).status),
                add.get_result(result.id).return_value) == ("SUCCESSFUL", 9)
    print("inline: ok")
""")


def run_app(tmp_path: Path, script: str) -> list[str]:
    """``script`` run in a process of its own beside the ``app`` package (its ``TASKS``);
    the lines it printed, once it exited 0."""
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "__init__.py").write_text("")
    (tmp_path / "app" / "tasks.py").write_text(TASKS)
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), str(tmp_path)])
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.splitlines()


def test_fake_and_inline_keep_task_results_in_memory_not_in_redis(tmp_path: Path) -> None:
    assert run_app(tmp_path, SCRIPT) == ["fake: ok", "inline: ok"]


VARIANT = textwrap.dedent("""
    import django
    from django.conf import settings

    queues = ["default", "high"]
    settings.configure(
        INSTALLED_APPS=["django_tasks", "wurk.contrib.django", "app"],
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
        WURK={"REDIS_URL": "redis://127.0.0.1:1/0", "SOCKET_TIMEOUT": 0.5},
        TASKS={"default": {"BACKEND": "wurk.contrib.django.tasks.WurkBackend",
                           "QUEUES": queues},
               "other": {"BACKEND": "wurk.contrib.django.tasks.WurkBackend",
                         "QUEUES": queues, "OPTIONS": {"RETRY": 0}}},
    )
    django.setup()
    import wurk.testing
    from wurk.job import registry
    from app.tasks import add

    urgent = add.using(queue_name="high", backend="other")  # a variant, as a module keeps one
    with wurk.testing.fake():
        result = add.enqueue(2, 3)
        read = add.get_result(result.id)
        print(read.task.queue_name, read.task.backend)
        print(registry.get("app.tasks.add").options.get("retry"))
        assert wurk.testing.drain_all() == 1
        result.refresh()
        print(str(result.status), result.return_value)
""")


def test_a_variant_made_by_using_does_not_replace_the_task(tmp_path: Path) -> None:
    """``add.using(...)`` makes another ``Task`` of the same function: the task a result
    of ``add.enqueue`` reads back, and the job the worker runs it as, stay ``add``'s."""
    assert run_app(tmp_path, VARIANT) == ["default default", "None", "SUCCESSFUL 5"]
