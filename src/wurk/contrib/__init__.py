"""Integrations with the frameworks Python teams use, each behind its own extra.

``wurk.contrib.django`` (``wurk[django]``), ``wurk.contrib.flask`` (``wurk[flask]``),
``wurk.contrib.fastapi`` (``wurk[fastapi]``), ``wurk.contrib.sqlalchemy``
(``wurk[sqlalchemy]``). Importing this package imports none of them.
"""
from __future__ import annotations

from typing import Any

from ..errors import ConfigError

__all__ = ["require_authorize"]


def require_authorize(dashboard: str | None, authorize: Any, example: str) -> None:
    """A mounted dashboard shows and changes every job: who may see it must be said."""
    if dashboard is not None and authorize is None:
        raise ConfigError(f"Wurk(dashboard={dashboard!r}) needs authorize=: a function "
                          f"deciding who may see and change every job (e.g. {example})")
