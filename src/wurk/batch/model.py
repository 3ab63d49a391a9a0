"""``wurk.Batch``: a group of jobs, with callbacks when they have all run or all succeeded.

1. ``Batch(description=..., callback_queue=..., tags=[...], linger=...)`` describes a new
   batch; ``Batch(bid)`` names an existing one (a job reopening its own batch, a callback
   reopening its parent) to add jobs to it.
2. ``on(event, target, options)``: ``complete``, ``success`` or ``death``; the target is a
   registered job (a ``wurk.Job`` class, whose ``on_<event>`` method runs, or an
   ``@wurk.job`` function), or its name, or ``"Name#method"``. It runs as an ordinary job
   ``(status, options)`` on the callback queue, in the context the batch was created in:
   the ``wurk.context.persist`` variables set there are kept with the batch and set around
   each callback (Sidekiq 7.3.3's CurrentAttributes for callbacks).
3. ``with batch.jobs():`` — every push from the code inside, on this thread or task, joins
   the batch, registered by the script that pushes it. The first block creates the batch in
   Redis; a batch created inside another batch's block is its child. A first block that
   pushed nothing pushes one no-op job, so the callbacks still fire. ``autoflush=N`` holds
   the block's pushes and writes them N at a time (``accounting.BlockWriter``); the block's
   end writes the rest, whether it ended normally or raised.
4. ``status`` (``wurk.BatchStatus``), ``invalidate_all()``, ``delete()``, ``remove_jobs()``.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, overload

from .. import context
from .. import payload as P
from ..client import writers
from ..client.default import default_client
from ..config import Config, default_config
from ..connections.lending import redis as lent_redis
from ..errors import BatchError, InvalidArguments
from ..job import open_batches_with
from ..reporting import report_error
from . import accounting
from . import block as blocks
from .middleware import install_client
from .status import BatchStatus, invalidated

__all__ = ["CALLBACK_CLASS", "DEFAULT_LINGER", "EMPTY_CLASS", "EVENTS", "MAX_LINGER",
           "MIN_LINGER", "Batch", "new_bid", "open_batch"]

EVENTS = ("complete", "success", "death")
# The class of callback jobs, and of the no-op job an empty block pushes (Sidekiq Pro 7.1's
# name, which Ruby wurk registers too).
CALLBACK_CLASS = "wurk.batch.Callback"
EMPTY_CLASS = "Sidekiq::Batch::Empty"
# A batch is kept this long after its success (Sidekiq Pro's default), never less than the
# floor: a status page polled right after success must still find it.
DEFAULT_LINGER = 24 * 60 * 60
MIN_LINGER = 30
# Ten years, the most batch_lib.lua keeps one (a longer stored linger is warned about).
MAX_LINGER = 10 * 365 * 24 * 60 * 60


def new_bid() -> str:
    """10 random bytes, URL-safe base64 without padding: 14 characters, as Pro's bids —
    drawn again when it would begin with ``-`` (one in 64), which a command line would take
    for an option (``wurk batches show -Xb…``). Pro's own may: the CLI says to write them
    after ``--``."""
    while True:
        bid = base64.urlsafe_b64encode(os.urandom(10)).rstrip(b"=").decode("ascii")
        if not bid.startswith("-"):
            return bid


def target_name(target: Any) -> str:
    """The wire name a callback target is stored under."""
    if isinstance(target, str):
        name, _, method = target.partition("#")
        if not name or (target.count("#") > 1) or ("#" in target and not method):
            raise BatchError(f"callback target {target!r} must be a job name or "
                             "'Name#method'")
        return target
    found = getattr(getattr(target, "definition", None), "name", None)
    if not isinstance(found, str):
        raise BatchError(f"callback target {target!r} is not a registered job: give a "
                         "wurk.Job class, an @wurk.job function, or a job's name")
    return found


class Batch:
    """A new batch to fill, or an existing one (by bid) to add jobs to."""

    def __init__(self, bid: str | None = None, *, description: str = "",
                 callback_queue: str = P.DEFAULT_QUEUE, callback_class: str = CALLBACK_CLASS,
                 tags: Sequence[str] = (), linger: float | None = None,
                 autoflush: int | None = None, config: Config | None = None) -> None:
        if bid is not None and (not isinstance(bid, str) or not bid):
            raise BatchError(f"bid must be a non-empty string, not {bid!r}")
        self._config = config
        if self.config.is_cluster:
            raise BatchError(
                "batches are not supported on Redis Cluster: a batch's record and its jobs' "
                "queues live in different hash slots, and its bookkeeping is one transaction "
                "(docs/scaling.md); workflows are built on batches")
        self.bid = bid if bid is not None else new_bid()
        self._exists = bid is not None  # created in Redis already
        self.parent_bid: str | None = None
        self.description = _checked_string("description", description)
        self.callback_queue = _checked_string("callback_queue", callback_queue) or P.DEFAULT_QUEUE
        self.callback_class = _checked_string("callback_class", callback_class) or CALLBACK_CLASS
        self.tags = _tags(tags)
        self.linger = _linger(linger)
        self.autoflush = _autoflush(autoflush)
        self.callbacks: list[tuple[str, str, dict[str, Any]]] = []
        # A process that fills or reopens a batch can run its jobs (inline, by hand):
        # ``Job.batch`` then reaches batches as it does in a worker.
        open_batches_with(open_batch)

    def __repr__(self) -> str:
        return f"<wurk.Batch {self.bid}>"

    @property
    def config(self) -> Config:
        return self._config if self._config is not None else default_config()

    # -- describing -------------------------------------------------------------------------
    def on(self, event: str, target: Any, options: Mapping[str, Any] | None = None) -> Batch:
        """Run ``target`` as a job ``(status, options)`` when ``event`` happens."""
        if event not in EVENTS:
            raise BatchError(f"unknown batch event {event!r}; expected one of {EVENTS}")
        if self._exists:
            raise BatchError(f"batch {self.bid} exists already: register callbacks before "
                             "its first jobs block")
        if options is None:
            options = {}
        if not isinstance(options, Mapping):
            raise BatchError(f"callback options must be a dict of JSON values, not "
                             f"{type(options).__name__}")
        try:
            P.check_args([dict(options)], what="callback option")
        except InvalidArguments as exc:
            raise BatchError(str(exc)) from None
        self.callbacks.append((event, target_name(target), dict(options)))
        return self

    # -- filling ----------------------------------------------------------------------------
    @overload
    def jobs(self) -> AbstractContextManager[Batch]: ...

    @overload
    def jobs(self, fn: Callable[[], Any]) -> Batch: ...

    def jobs(self, fn: Callable[[], Any] | None = None) -> AbstractContextManager[Batch] | Batch:
        """``with batch.jobs(): ...`` — every push inside joins this batch; the first block
        creates it. ``batch.jobs(fn)`` runs ``fn`` inside such a block."""
        if fn is None:
            return self._block()
        with self._block():
            fn()
        return self

    @contextmanager
    def _block(self) -> Iterator[Batch]:
        config = self.config
        install_client(config)  # the link that gives pushes inside the block its bid
        creating = not self._exists
        with lent_redis(config) as conn:
            if creating:
                outer = blocks.current()
                self.parent_bid = outer.bid if outer is not None else None
                accounting.create(conn, config, bid=self.bid, description=self.description,
                                  callback_queue=self.callback_queue,
                                  callback_class=self.callback_class,
                                  parent_bid=self.parent_bid, tags=self.tags,
                                  linger=self.linger, callbacks=self.callbacks,
                                  context=context.current(config))
                self._exists = True
            else:
                accounting.reopen(conn, config, self.bid)
        block = blocks.Block(self.bid)
        token = blocks.enter(block)
        writer = accounting.BlockWriter(block, self.autoflush)
        overlay = writers.set_overlay(writer)
        completed = False
        try:
            yield self
            if creating and block.pushed + writer.held == 0:
                # an empty batch still fires its callbacks, once its no-op job ran
                _push_empty(config, self.callback_queue)
            writer.flush()
            completed = True
        finally:
            writers.reset_overlay(overlay)
            blocks.leave(token)
            if not completed:
                _flush_after_raise(config, self.bid, writer)
            if creating:
                self._close(config, abandon=not completed and block.pushed == 0)

    def _close(self, config: Config, *, abandon: bool) -> None:
        """End the first block: the batch may fire from now on. A block that raised before
        pushing anything leaves nothing to wait for: the batch is deleted instead."""
        if abandon:
            self.delete()
            return
        with lent_redis(config) as conn:
            accounting.close(conn, config, self.bid)

    # -- reading and changing ---------------------------------------------------------------
    @property
    def status(self) -> BatchStatus:
        return BatchStatus(self.bid, config=self._config)

    def invalidate_all(self) -> int:
        """Mark this batch and every batch below it invalid; returns how many were marked.
        Their jobs' ``valid_within_batch()`` turns false: they should return early."""
        with lent_redis(self.config) as conn:
            return accounting.invalidate(conn, self.config, self.bid)

    def remove_jobs(self, *jids: str) -> int:
        """Take these jobs out of the batch's counts (Sidekiq Pro's ``remove_jobs``): they
        no longer count towards ``total`` and ``pending`` (nor ``failures``). Only jobs that
        have not succeeded are removed; returns how many. The jobs themselves stay where
        they are (``wurk.api.Queue.delete_job`` deletes one). Removing the last pending jobs
        completes the batch, and its callbacks fire."""
        for jid in jids:
            if not isinstance(jid, str) or not jid:
                raise BatchError(f"remove_jobs takes jids (non-empty strings), not {jid!r}")
        if not jids:
            return 0
        install_client(self.config)  # the events it may fire reach StatsD, as a block's do
        with lent_redis(self.config) as conn:
            return accounting.remove(conn, self.config, self.bid, list(dict.fromkeys(jids)))

    def invalidated(self) -> bool:
        """Whether this batch (or one above it) was invalidated."""
        return invalidated(self.bid, config=self._config)

    def delete(self) -> None:
        self.status.delete()


def _flush_after_raise(config: Config, bid: str, writer: accounting.BlockWriter) -> None:
    """Write the jobs a block held when it raised: their pushes returned jids, as they do
    without ``autoflush``, so they join the batch all the same. A failure is reported and
    does not hide the block's own exception."""
    held = writer.held
    try:
        writer.flush()
    except Exception as exc:
        report_error(config, exc, {"context": f"writing the {held} jobs held by a jobs block "
                                              f"of batch {bid} that raised"})


def open_batch(bid: str) -> Batch:
    """The batch ``bid`` as a job of it reopens it (``Job.batch``), through the configuration
    of the worker running that job."""
    return Batch(bid, config=blocks.worker_config())


def _push_empty(config: Config, queue: str) -> None:
    default_client(config).push({P.CLASS: EMPTY_CLASS, P.ARGS: [], P.QUEUE: queue})


def _checked_string(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise BatchError(f"batch {name} must be a string, not {value!r}")
    return value


def _tags(tags: Sequence[str]) -> list[str]:
    if isinstance(tags, str) or not all(isinstance(t, str) and t for t in tags):
        raise BatchError(f"batch tags must be a list of non-empty strings, not {tags!r}")
    return list(dict.fromkeys(tags))


def _autoflush(autoflush: int | None) -> int | None:
    if autoflush is None:
        return None
    if isinstance(autoflush, bool) or not isinstance(autoflush, int) or autoflush < 1:
        raise BatchError(f"batch autoflush must be a whole number of jobs, at least 1, not "
                         f"{autoflush!r}")
    return autoflush


def _linger(linger: float | None) -> float | None:
    if linger is None:
        return None
    # ``not MIN <= linger <= MAX`` refuses nan too, which every comparison lets through.
    if isinstance(linger, bool) or not isinstance(linger, (int, float)) or \
            not MIN_LINGER <= linger <= MAX_LINGER:
        raise BatchError(f"batch linger must be a number of seconds from {MIN_LINGER} to "
                         f"{MAX_LINGER} (ten years), not {linger!r}")
    return float(linger)
