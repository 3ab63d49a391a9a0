"""The process title ``ps`` shows, ``wurk <version> <words…>``, as Sidekiq sets its own.

A worker and a swarm's parent each say what they are doing in it; an in-process worker or a
hosted swarm leaves the host's title alone (their callers decide that).
"""

from __future__ import annotations

from .._version import __version__

__all__ = ["set_title"]


def set_title(*words: str) -> None:
    """``wurk <version>`` and the non-empty ``words``, as this process's title."""
    try:
        import setproctitle
    except ImportError:  # pragma: no cover - a core dependency, but optional at runtime
        return
    setproctitle.setproctitle(" ".join(["wurk", __version__, *(w for w in words if w)]))
