"""A Django project for the outbox's tests: PostgreSQL, MariaDB or SQLite as OUTBOX_DB says.

``OUTBOX_DB``: ``postgresql://user@host:port/name``, ``mysql+pymysql://user@host:port/name``
(MariaDB), or a path to an SQLite file.
``OUTBOX_REDIS``: the Redis URL (REDIS_URL is left out of the environment on purpose, so
tests can point wurk elsewhere); ``LEDGER_URL``: where jobs record that they ran.
"""

import os
from pathlib import Path
from urllib.parse import urlsplit

SECRET_KEY = "outbox-tests-only"
DEBUG = False
ALLOWED_HOSTS = ["*"]
USE_TZ = True
INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth", "wurk.contrib.django",
                  "orders"]
try:  # Django < 6: the django.tasks backport
    import django_tasks  # noqa: F401

    INSTALLED_APPS.insert(2, "django_tasks")
except ImportError:
    pass
MIDDLEWARE: list[str] = []
ROOT_URLCONF = "site_urls"
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"

_db = os.environ.get("OUTBOX_DB", str(Path(__file__).parent / "outbox.sqlite3"))
if _db.startswith("postgresql://"):
    _url = urlsplit(_db)
    DATABASES = {"default": {
        "ENGINE": "django.db.backends.postgresql", "NAME": _url.path.lstrip("/"),
        "USER": _url.username or "", "HOST": _url.hostname or "", "PORT": str(_url.port or ""),
        "CONN_MAX_AGE": 0}}
elif _db.startswith("mysql"):  # MariaDB, through PyMySQL standing in for mysqlclient
    import pymysql

    pymysql.install_as_MySQLdb()
    _url = urlsplit(_db)
    DATABASES = {"default": {
        "ENGINE": "django.db.backends.mysql", "NAME": _url.path.lstrip("/"),
        "USER": _url.username or "", "HOST": _url.hostname or "", "PORT": str(_url.port or ""),
        "CONN_MAX_AGE": 0}}
else:
    DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": _db,
                             "TEST": {"NAME": _db + ".test"},
                             "OPTIONS": {"timeout": 20}}}

WURK = {
    "REDIS_URL": os.environ.get("OUTBOX_REDIS"),
    "CONCURRENCY": 4,
    "TIMEOUT": 5,
    "FETCH_TIMEOUT": 0.2,
    "SOCKET_TIMEOUT": 1,
    "HEARTBEAT_INTERVAL": 0.5,
    "SCHEDULER_INITIAL_WAIT": 0,
    "OUTBOX_POLL_INTERVAL": 0.2,
    # A fetch whose reply a Redis restart lost leaves its job in the worker's in-flight list
    # until the reaper's next sweep gives it back: every second here, not every minute.
    "REAPER_INTERVAL": 1,
    "SKIP_DEFAULT_JOB_LOGGING": True,
    "AUTORELOAD": False,
}
TASKS = {"default": {"BACKEND": "wurk.contrib.django.tasks.WurkBackend"}}
LOGGING = {"version": 1, "disable_existing_loggers": False,
           "handlers": {"console": {"class": "logging.StreamHandler"}},
           "loggers": {"wurk": {"handlers": ["console"], "level": "INFO"}}}
