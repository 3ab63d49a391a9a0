"""``wurk.iteration.cancel(jid)``: ask an iterable job to stop, as Sidekiq's ``cancel!`` does
(the mark only; ``wurk.cancel`` also removes a waiting job and stops a running one of any
kind, ``wurk.control``).

It writes ``cancelled`` (Redis's time, epoch seconds) into ``it-<jid>`` once, and keeps the
state 30 days: a running job sees it at its next flush (within 5 s and one item) and stops
after running ``on_cancel``; a queued, scheduled or retrying one sees it when it starts and
runs none of its items. A job that is not iterable ignores it. Returns the time the
cancellation stands from (a second request keeps the first's); a state key of another type
(left as it is) or a stored time that cannot be read is an ``IterationStateError``.
"""

from __future__ import annotations

from ..config import Config, default_config
from ..connections.lending import redis as lent_redis
from ..stored import printable
from . import state as S

__all__ = ["cancel", "check_jid"]

# Longer than any jid Sidekiq or wurk makes (24 hex digits), short enough to show whole.
JID_LIMIT = 200


def check_jid(jid: object) -> str:
    """``jid`` when it can be a job id; a ``ValueError`` naming the problem otherwise."""
    if not isinstance(jid, str) or not jid:
        raise ValueError(f"a jid is a non-empty string, not {jid!r}")
    if len(jid) > JID_LIMIT or printable(jid) != jid or " " in jid:
        raise ValueError(f"{printable(jid[:JID_LIMIT])!r} is not a jid: at most {JID_LIMIT} "
                         "characters, no spaces or control characters")
    return jid


def cancel(jid: str, *, config: Config | None = None) -> float:
    """Cancel the iterable job ``jid``; the epoch seconds its cancellation stands from."""
    cfg = config or default_config()
    with lent_redis(cfg) as conn:
        reply = S.cancel_script.call(conn, [cfg.keys.iteration(check_jid(jid))],
                                     [S.STATE_TTL])
    return S.cancel_time(cfg.keys.iteration(jid), reply)
