"""A push on a connection whose transaction Django manages by hand
(``transaction.set_autocommit(False)``): no ``atomic()`` block is open, yet the transaction
may still roll back. Neither ``on_commit`` (Django refuses it there) nor the outbox's wake
can wait for its commit, so the push must be refused at the call, never sent at once for
data a rollback then erases. The project runs in a fresh process on SQLite and the
harness's Redis."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.helpers.server import Server

SRC = Path(__file__).resolve().parents[2] / "src"

JOBS = textwrap.dedent("""
    import wurk

    @wurk.job(name="Manual::Ship")
    def ship(n):
        return n
""")

TASKS = textwrap.dedent("""
    from django_tasks import task

    @task
    def add(a: int, b: int) -> int:
        return a + b
""")

SCRIPT = textwrap.dedent("""
    import sys
    import django
    from django.conf import settings

    settings.configure(
        INSTALLED_APPS=["django_tasks", "wurk.contrib.django", "app"],
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3",
                               "NAME": sys.argv[2]}},
        WURK={"REDIS_URL": sys.argv[1], "CLIENT": sys.argv[3]},
        TASKS={"default": {"BACKEND": "wurk.contrib.django.tasks.WurkBackend"}},
        USE_TZ=True,
    )
    django.setup()
    from django.core.management import call_command
    from django.db import transaction
    from django.db.transaction import TransactionManagementError

    import wurk
    import wurk.testing
    from app.jobs import ship
    from app.tasks import add

    call_command("migrate", verbosity=0)
    redis = wurk.default_config().pool("client").client

    def refused(push):
        try:
            push()
        except TransactionManagementError as exc:
            assert "set_autocommit" in str(exc), exc
            return True
        return False

    transaction.set_autocommit(False)
    try:
        outcomes = [refused(lambda: ship.perform_async(1)),
                    refused(lambda: add.enqueue(2, 3))]
        if sys.argv[3] == "outbox":  # a bulk push is a row too; never deferred otherwise
            outcomes.append(refused(lambda: ship.perform_bulk([[2], [3]])))
        # transactional=False still pushes at once, as documented.
        ship.set(transactional=False).perform_async(4)
        transaction.rollback()
    finally:
        transaction.set_autocommit(True)
    if sys.argv[3] == "outbox":
        wurk.testing.relay_outbox()
    queued = sorted(str(job) for job in redis.lrange("queue:default", 0, -1))
    print("refused:", outcomes)
    print("queued:", len(queued), [q for q in queued if '"args":[4]' not in q])
    # Autocommit again: a push goes at once.
    ship.perform_async(5)
    print("after:", redis.llen("queue:default"))
""")


@pytest.mark.parametrize("client", ["transactional", "outbox"])
def test_a_push_in_a_transaction_managed_by_hand_is_refused_not_sent_at_once(
        client: str, redis_server: Server, tmp_path: Path) -> None:
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "__init__.py").write_text("")
    (tmp_path / "app" / "jobs.py").write_text(JOBS)
    (tmp_path / "app" / "tasks.py").write_text(TASKS)
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), str(tmp_path)])
    env["WURK_HOME"] = str(tmp_path / "home")
    done = subprocess.run([sys.executable, "-c", SCRIPT, redis_server.url,
                           str(tmp_path / "db.sqlite3"), client],
                          env=env, capture_output=True, text=True, timeout=120)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    refused = [True, True, True] if client == "outbox" else [True, True]
    assert done.stdout.splitlines() == [f"refused: {refused}", "queued: 1 []",
                                        "after: 2"], output
