"""The process's client: chosen by the configuration, made once per configuration object.

1. ``default_client(config)`` is a plain ``Client``, a ``TransactionalClient`` when the
   configuration says ``client="transactional"`` (pushes deferred to the surrounding
   database transaction's commit), or an ``OutboxClient`` for ``client="outbox"`` (pushes
   written into the database's outbox table in that transaction). Its writer is a
   ``ReliableWriter`` when ``reliable_push`` is on (a push Redis cannot take is kept and
   sent later). Choosing here keeps the client module free of the ones that build on it.
2. ``push`` / ``push_bulk`` push a raw payload through it: ``wurk.push({...})``;
   ``apush`` / ``apush_bulk`` are the same for async code (``await wurk.apush({...})``).
   ``pool=`` sends the push to that shard, over a ``wurk.via`` block (``Pinned``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..config import Config, default_config
from ..options import SHARD
from .core import Client, pin
from .outbox import OutboxClient
from .reliable import writer_for
from .transactional import TransactionalClient

__all__ = ["apush", "apush_bulk", "default_client", "push", "push_bulk"]

_clients: dict[int, Client] = {}


def default_client(config: Config | None = None) -> Client:
    """One client per configuration object, made on first use."""
    cfg = config if config is not None else default_config()
    client = _clients.get(id(cfg))
    if client is None or client.config is not cfg:
        client = _clients[id(cfg)] = _client_class(cfg)(cfg, writer=writer_for(cfg))
    return client


def _client_class(config: Config) -> type[Client]:
    if config.client == "outbox":
        return OutboxClient
    return TransactionalClient if config.client == "transactional" else Client


def push(item: Mapping[str, Any], *, config: Config | None = None,
         pool: str | Config | None = None) -> str | None:
    """Push a raw payload (any class name, e.g. a Ruby job): ``wurk.push({...})``;
    ``pool=`` sends it to that shard (a name, a shard's view or a ``Config``), over a
    ``wurk.via`` block, as ``job.set(pool=...)`` does."""
    client, item = _pinned(item, config, pool, "wurk.push")
    return client.push(item)


def push_bulk(item: Mapping[str, Any], *, config: Config | None = None,
              pool: str | Config | None = None) -> list[str | None]:
    client, item = _pinned(item, config, pool, "wurk.push_bulk")
    return client.push_bulk(item)


async def apush(item: Mapping[str, Any], *, config: Config | None = None,
                pool: str | Config | None = None) -> str | None:
    """``wurk.push`` for async code: ``await wurk.apush({...})``, never blocking the loop."""
    client, item = _pinned(item, config, pool, "wurk.apush")
    return await client.apush(item)


async def apush_bulk(item: Mapping[str, Any], *, config: Config | None = None,
                     pool: str | Config | None = None) -> list[str | None]:
    client, item = _pinned(item, config, pool, "wurk.apush_bulk")
    return await client.apush_bulk(item)


def _pinned(item: Mapping[str, Any], config: Config | None, pool: str | Config | None,
            where: str) -> tuple[Client, Mapping[str, Any]]:
    """The client and the item of a raw push, its ``pool=`` carried in the item."""
    if pool is None:
        return default_client(config), item
    pinned = pin(pool, where)
    if not isinstance(item, Mapping):
        return default_client(config), item  # refused by the push itself, naming it
    own = pool if isinstance(pool, Config) else config
    return default_client(own), {**item, SHARD: pinned}
