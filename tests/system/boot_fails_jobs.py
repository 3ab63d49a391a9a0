"""A worker whose boot fails after its first heartbeat: the startup hook arranges for the
last step of ``Launcher.start`` (after the beat, the heartbeat thread, the leader election
and the scheduler started) to raise."""

from __future__ import annotations

from typing import Any

import wurk
import wurk.launcher


def _fail_late(config: Any) -> None:
    raise RuntimeError("boot failed after the first heartbeat")


@wurk.default_config().on("startup")
def arrange_late_failure() -> None:
    wurk.launcher.writer_for = _fail_late  # type: ignore[attr-defined,assignment]
