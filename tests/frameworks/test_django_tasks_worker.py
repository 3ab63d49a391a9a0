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

    def say(*values):  # one write: print's several could take a worker's log line between
        sys.stdout.write(" ".join(["=", *map(str, values)]) + "\\n")
        sys.stdout.flush()
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


SHARDED = textwrap.dedent("""
    import sys
    import django
    import wurk
    from django.conf import settings

    home, eu = sys.argv[1], sys.argv[1].rsplit("/", 1)[0] + "/1"
    settings.configure(
        INSTALLED_APPS=["django_tasks", "wurk.contrib.django", "app"],
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
        WURK={"REDIS_URL": home, "SHARDS": {"eu": eu}, "CLIENT": "default",
              "CONCURRENCY": 1, "FETCH_TIMEOUT": 0.2, "AUTORELOAD": False,
              "CAPSULES": [wurk.Capsule(name="europe", shard="eu", concurrency=1)]},
        TASKS={"default": {"BACKEND": "wurk.contrib.django.tasks.WurkBackend"},
               "eu": {"BACKEND": "wurk.contrib.django.tasks.WurkBackend",
                      "QUEUES": ["default", "slow"],
                      "OPTIONS": {"SHARD": "eu", "RETRY": 0}}},
        USE_TZ=True,
    )
    django.setup()
    from django_tasks import task

    @task(backend="eu")
    def add(a: int, b: int) -> int:
        return a + b

    @task(backend="eu")
    def boom() -> None:
        raise ValueError("boom")

    @task  # of the backend "default", on the default shard, unless using() names another
    def double(a: int) -> int:
        return 2 * a

    @task
    def crash() -> None:
        raise ValueError("crash")

    def say(*values):  # one write: print's several could take a worker's log line between
        sys.stdout.write(" ".join(["=", *map(str, values)]) + "\\n")
        sys.stdout.flush()

    config = wurk.default_config()
""")


def run_sharded(tmp_path: Path, redis_url: str, script: str) -> list[str]:
    """``script`` after ``SHARDED`` (the harness's Redis database 0 the default shard, 1 the
    shard ``eu``, served by a capsule of its own), in a process of its own: what it said."""
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "__init__.py").write_text("")
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), str(tmp_path)])
    env["WURK_HOME"] = str(tmp_path / "home")
    done = subprocess.run([sys.executable, "-c", SHARDED + textwrap.dedent(script), redis_url],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return [line[2:] for line in done.stdout.splitlines() if line.startswith("= ")]


def test_a_task_of_a_backend_naming_a_shard_keeps_its_record_on_that_shard(
        redis_server: Server, tmp_path: Path) -> None:
    """OPTIONS' SHARD sends the task's job to that shard, and its outcome is stored there;
    the record stayed on the default shard and ``get_result`` read the outcome there, so a
    finished task read as RUNNING, with no value. Both live on the shard now."""
    said = run_sharded(tmp_path, redis_server.url, """
        result = add.enqueue(2, 3)
        key = config.keys.task_result(result.id)
        say([config.pool("client").client.exists(key),
             config.shard("eu").pool("client").client.exists(key)])
        with wurk.InProcessWorker():
            wurk.ResultHandle(result.id, config.shard("eu")).result(timeout=60)
        read = add.get_result(result.id)
        say(read.status, read.return_value if str(read.status) == "SUCCESSFUL" else None)
    """)
    assert said == ["[0, 1]", "SUCCESSFUL 5"]


def test_a_task_of_a_backend_naming_a_shard_that_dies_is_recorded_failed_on_that_shard(
        redis_server: Server, tmp_path: Path) -> None:
    """The death handler marked the record FAILED on the default shard, where a sharded
    backend's record is not: the record itself stayed READY (only ``get_result`` said
    FAILED, from the outcome). The handler writes to the task's backend's shard now."""
    said = run_sharded(tmp_path, redis_server.url, """
        result = boom.enqueue()
        with wurk.InProcessWorker():
            try:
                wurk.ResultHandle(result.id, config.shard("eu")).result(timeout=60)
            except Exception as exc:
                say(type(exc).__name__)
        key = config.keys.task_result(result.id)
        record = boom.get_backend().store.load(result.id)
        say(record["status"], record["finished_at"] is not None, len(record["errors"]),
            config.pool("client").client.exists(key))
        say(boom.get_result(result.id).status)
    """)
    assert said == ["JobFailed", "FAILED True 1 0", "FAILED"]


def test_a_task_enqueued_through_another_backend_keeps_its_record_on_that_backends_shard(
        redis_server: Server, tmp_path: Path) -> None:
    """``task.using(backend="eu")`` sends the job to the backend eu's shard, but the worker
    and the death handler found the task's store through the task as ``@task`` made it,
    of the default backend: the attempt wrote a record of its own on the default shard and
    the one on eu stayed READY, read back through eu with no attempt, through a task of the
    other backend (whose ``refresh()`` found nothing). The job now names its backend, and
    each write and read follows it."""
    said = run_sharded(tmp_path, redis_server.url, """
        from django_tasks import task_backends
        from django_tasks.exceptions import TaskResultDoesNotExist

        home, eu = config.pool("client").client, config.shard("eu").pool("client").client
        result = double.using(backend="eu").enqueue(4)
        key = config.keys.task_result(result.id)
        say(result.backend, result.task.backend, [home.exists(key), eu.exists(key)],
            [home.llen("queue:default"), eu.llen("queue:default")])
        with wurk.InProcessWorker():
            wurk.ResultHandle(result.id, config.shard("eu")).result(timeout=60)
        record = task_backends["eu"].store.load(result.id)
        say(record["status"], record["backend"], len(record["worker_ids"]), home.exists(key))
        read = task_backends["eu"].get_result(result.id)
        say(read.status, read.return_value, read.backend, read.task.backend,
            len(read.worker_ids))
        read.refresh()
        result.refresh()
        say(read.status, result.status, result.return_value)
        try:
            double.get_result(result.id)  # through the default backend: not its shard
        except TaskResultDoesNotExist:
            say("not on the default shard")
    """)
    assert said == ["eu eu [0, 1] [0, 1]", "SUCCESSFUL eu 1 0", "SUCCESSFUL 8 eu eu 1",
                    "SUCCESSFUL SUCCESSFUL 8", "not on the default shard"]


def test_a_task_enqueued_async_through_another_backend_that_dies_is_failed_on_its_shard(
        redis_server: Server, tmp_path: Path) -> None:
    """``aenqueue`` through the backend eu (no retries): the death handler marked FAILED a
    record on the default shard, the task's first backend's, while eu's stayed READY."""
    said = run_sharded(tmp_path, redis_server.url, """
        import asyncio

        from django_tasks import task_backends

        home = config.pool("client").client
        result = asyncio.run(crash.using(backend="eu").aenqueue())
        with wurk.InProcessWorker():
            try:
                wurk.ResultHandle(result.id, config.shard("eu")).result(timeout=60)
            except Exception as exc:
                say(type(exc).__name__)
        record = task_backends["eu"].store.load(result.id)
        say(record["status"], record["finished_at"] is not None, len(record["errors"]),
            home.exists(config.keys.task_result(result.id)))
        read = asyncio.run(task_backends["eu"].aget_result(result.id))
        say(read.status, read.task.backend)
    """)
    assert said == ["JobFailed", "FAILED True 1 0", "FAILED eu"]


def test_a_job_naming_a_backend_that_is_not_a_wurk_backend_dies_with_a_clear_error(
        redis_server: Server, tmp_path: Path) -> None:
    """A task's job names the backend it was enqueued through; one naming no WurkBackend of
    TASKS (written by hand, or the backend since removed) cannot say where its record lives:
    the job goes to the dead set saying so, without running, and the worker goes on."""
    said = run_sharded(tmp_path, redis_server.url, """
        import json

        home = config.pool("client").client
        for name in ("gone", 7):
            wurk.Client(config).push({"class": double.module_path, "args": [[1], {}],
                                      "queue": "default", "retry": 0,
                                      "wurk_task_backend": name})
        with wurk.InProcessWorker():
            import time
            deadline = time.monotonic() + 60
            while home.zcard("dead") < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
        for job in sorted(home.zrange("dead", 0, -1), key=len):
            job = json.loads(job)
            say(job["error_class"], job["error_message"])
    """)
    assert said == [
        "wurk.Unretryable task __main__.double: its job names the django.tasks backend 7, "
        "not one of TASKS' WurkBackends",
        "wurk.Unretryable task __main__.double: its job names the django.tasks backend 'gone', "
        "not one of TASKS' WurkBackends"]


def test_a_result_read_through_another_backend_carries_the_task_as_it_was_enqueued(
        redis_server: Server, tmp_path: Path) -> None:
    """The result's task is the one ``using()`` made: of the backend eu (its ``refresh()``
    reads there), on the queue it was enqueued to. A record naming a queue eu refuses
    (written by hand) is read with the task's own queue, not an error in a view."""
    said = run_sharded(tmp_path, redis_server.url, """
        from django_tasks import task_backends

        eu = task_backends["eu"]
        result = double.using(backend="eu", queue_name="slow").enqueue(1)
        read = eu.get_result(result.id)
        say(read.task.backend, read.task.queue_name, read.status)
        eu.store.update(result.id, lambda record: record.update(queue="nope"))
        read = eu.get_result(result.id)
        say(read.task.backend, read.task.queue_name, read.status)
    """)
    assert said == ["eu slow READY", "eu default READY"]
