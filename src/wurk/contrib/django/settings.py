"""``settings.WURK`` → a ``wurk.Config`` with this app's middleware and transaction adapter.

1. Keys are ``wurk.Config`` settings in any case (``"REDIS_URL"`` or ``"redis_url"``);
   an unknown one is an error naming it. ``DATABASE``, ``IMPORTS`` and ``AUTORELOAD`` are
   this app's own, checked as the rest: an alias ``DATABASES`` does not have, or an
   ``AUTORELOAD`` that is not a bool (``"no"`` is true to Python), stops the startup.
2. ``client`` defaults to ``"outbox"``: a push inside ``atomic()`` is a row of the
   ``wurk_outbox`` table in the same transaction (``manage.py migrate`` makes it), relayed
   to Redis after the commit. ``"transactional"`` keeps the push in memory until
   ``on_commit`` instead (no table), ``"default"`` pushes at once. Either of the first two
   uses Django's transactions as the adapter (``DjangoAdapter``).
3. The server middleware closes stale database connections around each job; a death
   handler marks a ``django.tasks`` result ``FAILED`` once its job will not run again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured
from django.db import connections

from ...config import Config
from ...errors import ConfigError
from .connections import close_old_connections_around
from .results import mark_dead
from .transaction import DjangoAdapter

__all__ = ["AppSettings", "app_settings", "build_config"]

OWN_KEYS = ("database", "imports", "autoreload")


@dataclass(frozen=True)
class AppSettings:
    """This app's own keys of ``WURK``."""

    database: str = "default"
    imports: tuple[str, ...] = ()
    autoreload: bool = False
    config: dict[str, Any] = field(default_factory=dict)  # the rest: wurk.Config settings


def app_settings() -> AppSettings:
    raw = getattr(django_settings, "WURK", None) or {}
    if not isinstance(raw, Mapping):
        raise ImproperlyConfigured(f"settings.WURK must be a dict of wurk settings, "
                                   f"not {type(raw).__name__}")
    lowered: dict[str, Any] = {}
    for key, value in raw.items():
        if not isinstance(key, str):
            raise ImproperlyConfigured(f"settings.WURK has the key {key!r}; keys are setting "
                                       "names such as 'REDIS_URL'")
        lowered[key.lower()] = value
    own = {key: lowered.pop(key) for key in OWN_KEYS if key in lowered}
    imports = own.get("imports", ())
    if isinstance(imports, str) or not all(isinstance(m, str) for m in imports):
        raise ImproperlyConfigured(f"settings.WURK['IMPORTS'] must be a list of module "
                                   f"paths, not {imports!r}")
    database = own.get("database", "default")
    # connections.settings: DATABASES as Django reads it (a project without any has a
    # "default" of the dummy backend, where autocommit pushes go at once)
    if not isinstance(database, str) or database not in connections.settings:
        aliases = ", ".join(map(repr, connections.settings))
        raise ImproperlyConfigured(f"settings.WURK['DATABASE'] must name a database of "
                                   f"settings.DATABASES ({aliases}), not {database!r}")
    autoreload = own.get("autoreload", django_settings.DEBUG)
    if not isinstance(autoreload, bool):
        raise ImproperlyConfigured(f"settings.WURK['AUTORELOAD'] must be True or False, not "
                                   f"{autoreload!r}")
    return AppSettings(database=database, imports=tuple(imports), autoreload=autoreload,
                       config=lowered)


def build_config(**overrides: Any) -> Config:
    """The configuration ``settings.WURK`` describes, ``overrides`` (command flags) on top."""
    chosen = app_settings()
    values = {**chosen.config, **overrides}
    values.setdefault("client", "outbox")
    if values["client"] in ("transactional", "outbox"):
        values.setdefault("transaction", DjangoAdapter(chosen.database))
    try:
        config = Config.from_mapping(values, source="settings.WURK")
    except ConfigError as exc:
        raise ImproperlyConfigured(str(exc)) from None
    config.server_middleware.add(close_old_connections_around)
    config.death_handlers.append(mark_dead)  # django.tasks results: FAILED once final
    return config
