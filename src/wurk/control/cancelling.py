"""``wurk.cancel(jid)``: the job withdrawn (``withdraw.py``), a workflow told of its step.

A workflow's step taken out of its queue or set is dead, as one stopped running is: its
policy applies. ``withdraw`` itself knows nothing of workflows (``wurk.workflow.cancel``
withdraws the steps of a workflow it cancels whole, with no step death to tell), so the
workflow's death handler is handed to it here, on the admin side only.
"""

from __future__ import annotations

from ..config import Config, default_config
from ..workflow.middleware import WorkflowDeathHandler
from .withdraw import Cancellation, withdraw

__all__ = ["cancel"]


def cancel(jid: str, *, config: Config | None = None) -> Cancellation:
    """Withdraw the job ``jid`` (removed if it waits, stopped if it runs); a waiting
    workflow step taken out counts as dead for its workflow."""
    cfg = config or default_config()
    return withdraw(jid, config=cfg, removed=WorkflowDeathHandler(cfg))
