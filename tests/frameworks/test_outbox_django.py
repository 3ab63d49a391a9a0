"""The outbox with Django, on a real PostgreSQL, a real MariaDB and on SQLite: the project in
``outbox_site/`` runs its own test suite (``orders/tests.py``) under Django's test runner,
as a Django user runs theirs — a push in ``atomic()`` is a row of the transaction, committed
means pushed, rolled back means never pushed, Redis down at commit loses nothing, relays
never share a row, ``django.tasks`` takes the same path, the ``on_commit`` mode stays."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.server import Server

SITE = Path(__file__).with_name("outbox_site")


def site_env(redis_url: str, database: str, home: Path) -> dict[str, str]:
    """The project's environment: its Redis by OUTBOX_REDIS (REDIS_URL would win over any
    setting a test gives), its database by OUTBOX_DB."""
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    return {**env, "OUTBOX_REDIS": redis_url, "OUTBOX_DB": database,
            "LEDGER_URL": redis_url.rsplit("/", 1)[0] + "/1", "WURK_HOME": str(home),
            "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1"}


@pytest.mark.parametrize("database", ["sqlite", "postgresql", "mariadb"])
def test_the_outbox_under_djangos_test_runner(database: str, redis_server: Server,
                                              tmp_path: Path,
                                              request: pytest.FixtureRequest) -> None:
    url = {"postgresql": lambda: request.getfixturevalue("pg_url"),
           "mariadb": lambda: request.getfixturevalue("mariadb_url"),
           "sqlite": lambda: str(tmp_path / "outbox.sqlite3")}[database]()
    done = subprocess.run([sys.executable, "manage.py", "test", "orders", "-v", "2",
                           "--noinput"], cwd=SITE, env=site_env(redis_server.url, url,
                                                               tmp_path / "home"),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    assert "Ran 16 tests" in done.stderr, done.stderr[-2000:]
