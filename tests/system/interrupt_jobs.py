"""Jobs that wait for their worker to be told to stop, loaded with ``-r`` beside
``worker_jobs``: each notes what ``interrupted()`` said when it started and when it ended."""

from __future__ import annotations

import asyncio
import time

import wurk
from tests.system.worker_jobs import r

# A job that never saw the signal gives up after this, so a failing test cannot hang.
PATIENCE = 20.0


class Patient(wurk.Job, name="Sys::Patient"):
    def perform(self, key: str) -> None:
        r().rpush(f"{key}:started", int(self.interrupted()))
        deadline = time.monotonic() + PATIENCE
        while not self.interrupted() and time.monotonic() < deadline:
            time.sleep(0.02)
        r().rpush(f"{key}:saw", int(self.interrupted()))


@wurk.job(name="Sys::PatientAsync")
async def patient_async(key: str) -> None:
    r().rpush(f"{key}:started", int(wurk.interrupted()))
    deadline = time.monotonic() + PATIENCE
    while not wurk.interrupted() and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    r().rpush(f"{key}:saw", int(wurk.interrupted()))
