"""Job options and queue names, checked — below the configuration, so the configuration's
periodic loops and the job definitions share one check.

1. ``parse_queue``: ``"name"`` or ``"name,weight"``; ``check_queue_name`` refuses an empty
   name and the separator wurk reserves for in-flight lists.
2. ``validate_options``: the options Sidekiq gives meaning to (``queue``, ``retry``,
   ``retry_for``…) have the right type; any other must be JSON-native. Each message names
   the option, the value and what was expected.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from . import payload as P
from .errors import ConfigError, InvalidArguments
from .keys import PRIVATE_SEPARATOR

__all__ = ["check_queue_name", "parse_queue", "validate_options"]


def parse_queue(spec: str) -> tuple[str, int]:
    """``"critical,3"`` → ``("critical", 3)``; a bare name has weight 0 (strict order)."""
    name, _, weight_text = spec.partition(",")
    name = name.strip()
    check_queue_name(name)
    if not weight_text:
        return name, 0
    try:
        weight = int(weight_text)
    except ValueError:
        raise ConfigError(
            f"queue {spec!r}: the weight {weight_text!r} is not a whole number "
            "(write NAME or NAME,WEIGHT, e.g. critical,3)"
        ) from None
    if weight < 0:
        raise ConfigError(f"queue {spec!r}: the weight must be 0 or more")
    return name, weight


def check_queue_name(name: str) -> None:
    if not name:
        raise ConfigError("a queue name is empty")
    if PRIVATE_SEPARATOR in name:
        raise ConfigError(
            f"queue name {name!r} contains {PRIVATE_SEPARATOR!r}, which wurk reserves for "
            "in-flight lists; choose another name"
        )


def validate_options(options: Mapping[str, Any], *, where: str) -> dict[str, Any]:
    """Check the options Sidekiq gives meaning to; the message names option, value and fix."""
    result = dict(options)
    for key, value in result.items():
        _check_option(key, value, where)
    if P.RETRY_FOR in result:
        result[P.RETRY_FOR] = int(result[P.RETRY_FOR])
    return result


def _check_option(key: str, value: Any, where: str) -> None:
    def bad(expected: str) -> ConfigError:
        return ConfigError(f"{where}: option {key}={value!r} is invalid; expected {expected}")

    if key in (P.QUEUE, P.RETRY_QUEUE):
        if not isinstance(value, str):
            raise bad("a queue name")
        parse_queue(value)
    elif key == P.RETRY:
        if not (isinstance(value, bool) or (isinstance(value, int) and value >= 0)):
            raise bad("True, False or a number of retries ≥ 0")
    elif key == P.RETRY_FOR:
        seconds = value.total_seconds() if isinstance(value, timedelta) else value
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds <= 0:
            raise bad("a positive number of seconds")
    elif key == P.DEAD:
        if not isinstance(value, bool):
            raise bad("True or False")
    elif key == P.BACKTRACE:
        if not (isinstance(value, bool) or (isinstance(value, int) and value >= 0)):
            raise bad("True, False or a number of lines")
    elif key == P.TAGS:
        if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
            raise bad("a list of strings")
    else:
        try:
            P.check_args([value], what=f"option {key!r}")
        except InvalidArguments as exc:
            raise ConfigError(f"{where}: {exc}") from None
