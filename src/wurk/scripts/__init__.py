"""The Lua scripts wurk runs inside Redis, loaded once and reloaded on ``NOSCRIPT``.

Every script treats payloads as opaque strings: Redis's cjson would round big integers and
reorder keys, so a script may decode a payload only to read a field, never re-encode it
.
"""

from __future__ import annotations

import hashlib
import importlib.resources
from functools import cache, cached_property
from typing import Any, Protocol

import redis

__all__ = ["Script", "source"]


class _Caller(Protocol):
    """Anything that sends one command and returns its raw reply (a lease, ``wurk.redis()``)."""

    def call(self, *args: Any) -> Any: ...


@cache
def source(name: str) -> str:
    """The text of ``scripts/<name>`` shipped in the package."""
    return (importlib.resources.files("wurk") / "scripts" / name).read_text("utf-8")


class Script:
    """A script's text and SHA1, for ``EVALSHA`` on a leased connection.

    ``prelude`` names shared scripts whose local functions the script calls: their text goes
    before its own, in one chunk (``poison_counter.lua``: the poison counter of a payload).
    """

    def __init__(self, name: str, *, prelude: tuple[str, ...] = ()) -> None:
        self.name = name
        self.prelude = prelude

    # Read on first use, not when the module defining the script is imported: a worker
    # imports every feature's module, and most of their scripts (batches, limiters, unique
    # locks) never run in it, while the text of each stays in memory for the process's life.
    @cached_property
    def text(self) -> str:
        return "".join(source(part) for part in (*self.prelude, self.name))

    @cached_property
    def sha(self) -> str:
        return hashlib.sha1(self.text.encode("utf-8")).hexdigest()

    def evalsha(self, keys: list[str], args: list[object]) -> tuple[object, ...]:
        return ("EVALSHA", self.sha, len(keys), *keys, *args)

    def load(self) -> tuple[object, ...]:
        return ("SCRIPT", "LOAD", self.text)

    def call(self, conn: _Caller, keys: list[str], args: list[object]) -> Any:
        """Run on ``conn``: one round trip, two more the first time a server lacks it."""
        try:
            return conn.call(*self.evalsha(keys, args))
        except redis.exceptions.NoScriptError:
            pass  # a restarted or flushed server: nothing ran, so it is safe to send again
        conn.call(*self.load())
        return conn.call(*self.evalsha(keys, args))

    def call_many(self, r: redis.Redis, calls: list[tuple[list[str], list[object]]]
                  ) -> list[Any]:
        """Run once per ``(keys, args)`` in one pipeline on a redis-py client; error replies
        come back in place. Calls a server without the script refused are sent again after
        loading it (they did not run)."""
        replies = self._pipelined(r, calls)
        missing = [i for i, reply in enumerate(replies)
                   if isinstance(reply, redis.exceptions.NoScriptError)]
        if missing:
            r.execute_command(*self.load())  # type: ignore[no-untyped-call]
            for index, reply in zip(missing, self._pipelined(r, [calls[i] for i in missing]),
                                    strict=True):
                replies[index] = reply
        return replies

    async def acall_many(self, r: Any, calls: list[tuple[list[str], list[object]]]
                         ) -> list[Any]:
        """``call_many`` on redis-py's asyncio client."""
        replies = await self._apipelined(r, calls)
        missing = [i for i, reply in enumerate(replies)
                   if isinstance(reply, redis.exceptions.NoScriptError)]
        if missing:
            await r.execute_command(*self.load())
            again = await self._apipelined(r, [calls[i] for i in missing])
            for index, reply in zip(missing, again, strict=True):
                replies[index] = reply
        return replies

    async def _apipelined(self, r: Any, calls: list[tuple[list[str], list[object]]]
                          ) -> list[Any]:
        pipe = r.pipeline(transaction=False)
        for keys, args in calls:
            pipe.execute_command(*self.evalsha(keys, args))
        return list(await pipe.execute(raise_on_error=False))

    def _pipelined(self, r: redis.Redis, calls: list[tuple[list[str], list[object]]]
                   ) -> list[Any]:
        pipe = r.pipeline(transaction=False)
        for keys, args in calls:
            pipe.execute_command(*self.evalsha(keys, args))  # type: ignore[no-untyped-call]
        return list(pipe.execute(raise_on_error=False))
