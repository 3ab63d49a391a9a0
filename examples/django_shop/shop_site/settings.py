"""A tiny Django project using wurk: jobs, a django.tasks backend and the dashboard.

Redis: ``REDIS_URL`` if set, else wurk's embedded server in ``./.wurk``.
"""

import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
# Where the databases go (the test suite points it at a temporary directory).
DATA_DIR = Path(os.environ.get("SHOP_DATA_DIR", BASE_DIR))

SECRET_KEY = "example-only-not-secret"
DEBUG = os.environ.get("SHOP_DEBUG", "") == "1"
ALLOWED_HOSTS = ["*"]
USE_TZ = True

INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "wurk.contrib.django",
    "shop",
]
try:  # Django < 6: the django.tasks backport
    import django_tasks  # noqa: F401

    INSTALLED_APPS.insert(3, "django_tasks")
except ImportError:
    pass

MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
]
ROOT_URLCONF = "shop_site.urls"
LOGIN_URL = "/login/"
TEMPLATES = [{"BACKEND": "django.template.backends.django.DjangoTemplates", "DIRS": [],
              "APP_DIRS": True, "OPTIONS": {}}]

# A file database, also for tests (NAME under TEST): the worker the tests start is another
# process and must see the rows the test committed. SHOP_DB points the worker at it.
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("SHOP_DB", str(DATA_DIR / "shop.sqlite3")),
        "TEST": {"NAME": str(DATA_DIR / "test-shop.sqlite3")},
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"

WURK = {
    "CONCURRENCY": 2,
    "TIMEOUT": 5,
    # Short waits so the tests' worker starts and stops quickly.
    "FETCH_TIMEOUT": 0.2,
    "HEARTBEAT_INTERVAL": 1,
    "SCHEDULER_INITIAL_WAIT": 0,
}

TASKS = {
    "default": {"BACKEND": "wurk.contrib.django.tasks.WurkBackend"},
    # Tasks that must not be retried: a failure is final at once.
    "once": {"BACKEND": "wurk.contrib.django.tasks.WurkBackend", "OPTIONS": {"RETRY": False}},
}
