"""The Lua scripts wurk runs inside Redis, loaded once and reloaded on ``NOSCRIPT``.

Every script treats payloads as opaque strings: Redis's cjson would round big integers and
reorder keys, so a script may decode a payload only to read a field, never re-encode it
(``wire-format.md`` §14.3).
"""

from __future__ import annotations

import hashlib
import importlib.resources
from functools import cache

__all__ = ["Script", "source"]


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
        self.text = "".join(source(part) for part in (*prelude, name))
        self.sha = hashlib.sha1(self.text.encode("utf-8")).hexdigest()

    def evalsha(self, keys: list[str], args: list[object]) -> tuple[object, ...]:
        return ("EVALSHA", self.sha, len(keys), *keys, *args)

    def load(self) -> tuple[object, ...]:
        return ("SCRIPT", "LOAD", self.text)
