"""The live numbers as Server-Sent Events: one stream per page, rather than polling.

1. ``EventStream`` is a plain ASGI endpoint: it sends a ``stats`` event (``/stats``'s
   document) every ``web_stream_interval`` seconds while a second task waits for the
   client to go away and ends the stream at once when it does.
2. ``LiveStats`` shares one snapshot among every open stream: ten open tabs cost Redis what
   one costs.
3. A stream ends after ``STREAM_MAX_SECONDS``; the browser's ``EventSource`` reconnects by
   itself (after ``RECONNECT_MS``), so no connection outlives a restart by much.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import anyio
from starlette.types import Receive, Scope, Send

from .. import stored as values
from ..errors import RedisUnavailable
from . import data
from .context import STATE_ATTRIBUTE, Dashboard

__all__ = ["EventStream", "LiveStats"]

log = logging.getLogger("wurk.web")

# Long enough that reconnecting costs nothing noticeable, short enough that a stream whose
# client vanished without a FIN, or a server being stopped, is not held for long.
STREAM_MAX_SECONDS = 300.0
RECONNECT_MS = 2000
# A snapshot younger than this share of the interval is handed to the next stream as is.
SHARE_FRACTION = 0.9


class LiveStats:
    """The latest snapshot, read again at most once per interval whatever the streams."""

    def __init__(self) -> None:
        self._value: dict[str, Any] | None = None
        self._at = 0.0
        self._lock: anyio.Lock | None = None

    async def get(self, dash: Dashboard) -> dict[str, Any]:
        if self._lock is None:  # made in the event loop, on first use
            self._lock = anyio.Lock()
        async with self._lock:
            if self._value is None or self._age() >= dash.stream_interval * SHARE_FRACTION:
                self._value = await dash.run(data.stats_snapshot, dash.config)
                self._at = time.monotonic()
            return self._value

    def _age(self) -> float:
        return time.monotonic() - self._at


class EventStream:
    """``GET /stats/stream``: ``text/event-stream`` until the client leaves."""

    def __init__(self, live: LiveStats, *, max_seconds: float = STREAM_MAX_SECONDS) -> None:
        self.live = live
        self.max_seconds = max_seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        dash: Dashboard = getattr(scope["app"].state, STATE_ATTRIBUTE)
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-store"),
            (b"x-accel-buffering", b"no"),  # a buffering proxy would hold events back
        ]})
        async with anyio.create_task_group() as group:
            group.start_soon(self._until_disconnect, receive, group.cancel_scope)
            with anyio.move_on_after(self.max_seconds):
                await self._pump(dash, send)
            group.cancel_scope.cancel()
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _pump(self, dash: Dashboard, send: Send) -> None:
        await send(body(f"retry: {RECONNECT_MS}\n\n"))
        while not dash.closing.is_set():
            await send(body(await self._event(dash)))
            await anyio.sleep(dash.stream_interval)

    async def _event(self, dash: Dashboard) -> str:
        """The next event; while Redis is unreachable, an ``unavailable`` event instead
        (the stream lives on and resumes by itself)."""
        try:
            snapshot = await self.live.get(dash)
        except RedisUnavailable as exc:
            log.warning("dashboard live stream: %s", exc)
            return "event: unavailable\ndata: {}\n\n"
        document = json.dumps(values.to_json(snapshot), allow_nan=False)  # as /stats
        return f"event: stats\ndata: {document}\n\n"

    @staticmethod
    async def _until_disconnect(receive: Receive, scope: anyio.CancelScope) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        scope.cancel()


def body(text: str) -> dict[str, Any]:
    return {"type": "http.response.body", "body": text.encode("utf-8"), "more_body": True}
