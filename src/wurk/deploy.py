"""Deploy marks: a vertical line on the metrics charts where a release went out.

1. ``mark(label)`` records the current UTC minute under ``<YYYYMMDD>-marks`` (kept 90 days),
   as Sidekiq's ``Deploy.mark!`` does, so either dashboard draws it.
2. Every process of a deploy may call it: a 60 s ``deploylock-<label>`` (``SET NX``) lets only
   the first one write. The lock and the mark are set in one script (``deploy_mark.lua``), so
   a connection lost on the way leaves both or neither, never a lock without its mark. A
   minute holds one mark: a second label in it writes nothing, and ``mark()`` returns False,
   as it does for the processes that were not first.
3. Without a label, the last git commit's "short-sha subject" names the deploy (cut to
   ``LABEL_LIMIT``); git missing, failing or taking over ``GIT_TIMEOUT`` s is a ``ValueError``
   saying to pass a label.
4. A label is one line of at most ``LABEL_LIMIT`` characters (what the dashboards show): one
   with control characters or longer is refused with a ``ValueError``, before any write.
5. A marks key holding another type than a hash (written by hand) is a ``ValueError`` naming
   the key, and the lock is left free, so the mark can be made once the key is repaired.
"""

from __future__ import annotations

import datetime as dt
import re
import subprocess
from typing import Any

from .config import Config, default_config
from .scripts import Script

__all__ = ["MARKS_TTL", "mark"]

MARKS_TTL = 90 * 24 * 60 * 60
# Long enough for every process of one deploy to boot and call mark() with the same label.
LOCK_TTL = 60
GIT_TIMEOUT = 5.0
# The dashboards show this much of a label (wurk.metrics.query.MARK_LABEL_LIMIT).
LABEL_LIMIT = 200
_MARK = Script("deploy_mark.lua")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def mark(label: str | None = None, *, config: Config | None = None,
         at: dt.datetime | None = None) -> bool:
    """Mark a deploy now (or ``at``); the label defaults to the last commit's "sha subject".

    Returns True when this call wrote the mark; False when it did not: another process
    marked this label within the minute, or another label already marks this minute.
    """
    cfg = config if config is not None else default_config()
    text = label if label is not None else _git_label()
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"a deploy mark needs a label (text), not {label!r}")
    if _CONTROL.search(text):
        raise ValueError(f"a deploy mark's label is one line without control characters, "
                         f"not {text[:LABEL_LIMIT]!r}")
    if len(text) > LABEL_LIMIT:
        raise ValueError(f"a deploy mark's label is at most {LABEL_LIMIT} characters (the "
                         f"dashboards show no more), not {len(text)}")
    when = (at or dt.datetime.now(dt.timezone.utc)).astimezone(dt.timezone.utc)
    minute = when.replace(second=0, microsecond=0)
    stamp = minute.strftime("%Y-%m-%dT%H:%M:%SZ")
    keys = cfg.keys
    marks = keys.deploy_marks(minute.date())

    def send(r: Any) -> Any:
        script = r.register_script(_MARK.text)  # EVALSHA, loading it on NOSCRIPT
        return script(keys=[marks, keys.deploy_lock(text)],
                      args=[stamp, text, LOCK_TTL, MARKS_TTL])

    done = cfg.pool("client").run(send)
    if isinstance(done, (bytes, str)):
        kind = done.decode() if isinstance(done, bytes) else done
        raise ValueError(f"deploy mark not written: Redis key {marks!r} holds a {kind}, "
                         f"not the hash of marks; delete it (DEL {marks}) and mark again")
    return bool(done == 1)  # 0: the lock is held, or another label holds this minute


def _git_label() -> str:
    """``<short sha> <subject>`` of the checkout's last commit, as Sidekiq labels a deploy."""
    try:
        done = subprocess.run(["git", "log", "-1", "--format=%h %s"], capture_output=True,
                              text=True, timeout=GIT_TIMEOUT, check=True)
    except subprocess.CalledProcessError as exc:
        said = (exc.stderr or "").strip().splitlines()
        why = said[0] if said else f"git exited with {exc.returncode}"
        raise ValueError("deploy.mark() without a label reads the last git commit, and git "
                         f"could not tell it ({why[:LABEL_LIMIT]}); pass a label") from None
    except (OSError, subprocess.SubprocessError) as exc:
        raise ValueError("deploy.mark() without a label reads the last git commit, and git "
                         f"could not tell it ({exc}); pass a label") from None
    subject = " ".join(_CONTROL.sub(" ", done.stdout).split())
    return subject[:LABEL_LIMIT]
