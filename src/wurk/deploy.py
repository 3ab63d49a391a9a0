"""Deploy marks: a vertical line on the metrics charts where a release went out.

1. ``mark(label)`` records the current UTC minute under ``<YYYYMMDD>-marks`` (kept 90 days),
   as Sidekiq's ``Deploy.mark!`` does, so either dashboard draws it.
2. Every process of a deploy may call it: a 60 s ``deploylock-<label>`` (``SET NX``) lets only
   the first one write.
3. Without a label, the last git commit's "short-sha subject" names the deploy.
"""

from __future__ import annotations

import datetime as dt
import subprocess
from typing import Any

from .config import Config, default_config

__all__ = ["MARKS_TTL", "mark"]

MARKS_TTL = 90 * 24 * 60 * 60
# Long enough for every process of one deploy to boot and call mark() with the same label.
LOCK_TTL = 60
GIT_TIMEOUT = 5.0


def mark(label: str | None = None, *, config: Config | None = None,
         at: dt.datetime | None = None) -> bool:
    """Mark a deploy now (or ``at``); the label defaults to the last commit's "sha subject".

    Returns True when this call wrote the mark, False when another process already did.
    """
    cfg = config if config is not None else default_config()
    text = label if label is not None else _git_label()
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"a deploy mark needs a label (text), not {label!r}")
    when = (at or dt.datetime.now(dt.timezone.utc)).astimezone(dt.timezone.utc)
    minute = when.replace(second=0, microsecond=0)
    stamp = minute.strftime("%Y-%m-%dT%H:%M:%SZ")
    keys = cfg.keys

    def send(r: Any) -> bool:
        if not r.set(keys.deploy_lock(text), stamp, nx=True, ex=LOCK_TTL):
            return False
        pipe = r.pipeline(transaction=True)
        pipe.hsetnx(keys.deploy_marks(minute.date()), stamp, text)
        pipe.expire(keys.deploy_marks(minute.date()), MARKS_TTL)
        pipe.execute()
        return True

    return bool(cfg.pool("client").run(send))


def _git_label() -> str:
    """``<short sha> <subject>`` of the checkout's last commit, as Sidekiq labels a deploy."""
    try:
        done = subprocess.run(["git", "log", "-1", "--format=%h %s"], capture_output=True,
                              text=True, timeout=GIT_TIMEOUT, check=True)
    except (OSError, subprocess.SubprocessError) as exc:
        raise ValueError("deploy.mark() without a label reads the last git commit, and git "
                         f"could not tell it ({exc}); pass a label") from None
    return done.stdout.strip()
