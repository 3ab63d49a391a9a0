"""The swarm's settings: how many children, when to recycle them, how fast to supervise.

1. ``SwarmSettings`` holds every number the supervisor uses, each validated with a message
   naming the field; the intervals are settings so tests can run them fast.
2. ``from_mapping`` reads the config file's ``swarm:`` section
   (``swarm: {count: 4, max_memory_mb: 512, max_jobs: 0}``); an
   unknown key is an error naming it.
3. ``resolve`` merges flags > file > environment (``WURK_COUNT``/``SIDEKIQ_COUNT``,
   ``WURK_MAXMEM_MB``/``SIDEKIQ_MAXMEM_MB``) > defaults; the count defaults to the number of
   CPU cores. The environment is read when called, never at import.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from ..errors import ConfigError

__all__ = ["SwarmSettings", "default_count"]

# One supervise tick: the longest a signal, a dead child or a due respawn waits.
SUPERVISE_TICK = 0.2
# RSS is read from /proc per child; every 10 s is plenty to catch a slow leak.
MEMORY_CHECK_INTERVAL = 10.0
# How long a rolling restart waits for a replacement's first heartbeat before it stops the
# old child anyway (Sidekiq Enterprise's swarm gives a child 60 s to boot).
HEARTBEAT_WAIT = 60.0
# Crash backoff: first respawn after 1 s, doubling to at most 30 s; a child that lived a
# minute was healthy, so its death starts the count again.
BACKOFF_BASE = 1.0
BACKOFF_MAX = 30.0
BACKOFF_RESET = 60.0
# What the parent waits beyond the shutdown timeout before SIGKILL: each child needs its own
# deadline, then the requeue, its 3 s interrupt grace and the heartbeat removal.
SHUTDOWN_GRACE = 5.0
# A slot whose child exits before its first heartbeat this many times in a row cannot boot
# (a broken deploy, not a crash): the swarm stops instead of respawning forever.
BOOT_ATTEMPTS = 3

_ENV_COUNT = ("WURK_COUNT", "SIDEKIQ_COUNT")
_ENV_MEMORY = ("WURK_MAXMEM_MB", "SIDEKIQ_MAXMEM_MB")
_WHOLE = ("count", "max_memory_mb", "max_jobs", "boot_attempts")


def default_count() -> int:
    """The CPU cores this process may run on (its affinity: a pinned container sees few)."""
    affinity = getattr(os, "sched_getaffinity", None)
    if affinity is not None:  # not on macOS
        return len(affinity(0)) or 1
    return os.cpu_count() or 1


@dataclass(frozen=True, kw_only=True)
class SwarmSettings:
    """Everything the supervisor needs besides the worker's own ``Config``."""

    count: int = field(default_factory=default_count)
    max_memory_mb: int = 0
    max_jobs: int = 0
    tick: float = SUPERVISE_TICK
    memory_check_interval: float = MEMORY_CHECK_INTERVAL
    heartbeat_wait: float = HEARTBEAT_WAIT
    backoff_base: float = BACKOFF_BASE
    backoff_max: float = BACKOFF_MAX
    backoff_reset: float = BACKOFF_RESET
    shutdown_grace: float = SHUTDOWN_GRACE
    boot_attempts: int = BOOT_ATTEMPTS

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in _WHOLE:
                _check_whole(f.name, value, minimum=1 if f.name in ("count",
                                                                     "boot_attempts") else 0)
            else:
                _check_seconds(f.name, value, positive=f.name == "tick")

    @classmethod
    def from_mapping(cls, section: Mapping[str, Any], *,
                     source: str = "configuration") -> SwarmSettings:
        """Build from the config file's ``swarm:`` section."""
        return cls(**_known(section, source))

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def resolve(section: Mapping[str, Any] | None, flags: Mapping[str, Any], *,
            environ: Mapping[str, str] | None = None,
            source: str = "configuration") -> SwarmSettings:
    """Flags > the file's ``swarm:`` section > the environment > defaults."""
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    count = _env_number(env, _ENV_COUNT)
    if count is not None:
        values["count"] = max(1, count)  # a fraction of one process is one (Sidekiq's)
    memory = _env_number(env, _ENV_MEMORY)
    if memory is not None:
        values["max_memory_mb"] = memory  # 0: off, as the flag and the file's key say
    values.update(_known(section or {}, source))
    values.update({k: v for k, v in flags.items() if v is not None})
    return SwarmSettings(**values)


def _known(section: Mapping[str, Any], source: str) -> dict[str, Any]:
    if not isinstance(section, Mapping):
        raise ConfigError(f"{source}: swarm must be a mapping such as "
                          f"{{count: 4, max_memory_mb: 512, max_jobs: 0}}, not {section!r}")
    names = {f.name for f in fields(SwarmSettings)}
    values = {str(k).lstrip(":"): v for k, v in section.items()}
    unknown = sorted(set(values) - names)
    if unknown:
        raise ConfigError(f"{source}: unknown swarm setting {unknown[0]!r}; known: "
                          + ", ".join(sorted(names)))
    return values


def _env_number(env: Mapping[str, str], names: tuple[str, ...]) -> int | None:
    """A whole number ≥ 0 from the first variable set; ``2.5`` means 2, as Sidekiq reads
    it. Negative is an error, not a number quietly made into another."""
    for name in names:
        text = env.get(name)
        if not text:
            continue
        try:
            number = int(float(text))
        except (ValueError, OverflowError):  # OverflowError: inf, 1e400
            raise ConfigError(f"environment variable {name}={text!r} is not a number") from None
        if number < 0:
            raise ConfigError(f"environment variable {name}={text!r} is not a number ≥ 0")
        return number
    return None


def _check_whole(name: str, value: Any, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"swarm {name} must be a whole number of at least {minimum}, "
                          f"not {value!r}")


def _check_seconds(name: str, value: Any, *, positive: bool) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            not math.isfinite(_as_float(value)) or value < 0 or (positive and value == 0):
        bound = "> 0" if positive else "≥ 0"
        raise ConfigError(f"swarm {name} must be a number of seconds {bound}, not {value!r}")


def _as_float(value: int | float) -> float:
    """``value`` as a float; inf for an integer no float holds (400 digits)."""
    try:
        return float(value)
    except OverflowError:
        return math.inf
