"""Jobs of the results system tests, run by a real ``wurk worker`` process (``-r``) while
the test process pushes them and waits for their results."""

from __future__ import annotations

import asyncio
import os

import wurk


class CardDeclined(Exception):
    """An application's own error: its class travels by name, module included."""


@wurk.job(name="Results::Add", result_ttl=600)
def add(a: int, b: int) -> dict[str, int]:
    return {"sum": a + b, "pid": os.getpid()}


@wurk.job(name="Results::AsyncAdd", result_ttl=600)
async def aadd(a: int, b: int) -> int:
    await asyncio.sleep(0.01)
    return a + b


@wurk.job(name="Results::Charge", result_ttl=600, retry=0)
def charge(card: str) -> None:
    raise CardDeclined(f"card {card} declined")
