"""The job each order pushes: it records that it ran, and checks its row is there."""

import os

import redis

import wurk

from .models import Order

_ledger: redis.Redis | None = None


def ledger() -> redis.Redis:
    global _ledger
    if _ledger is None:
        _ledger = redis.Redis.from_url(os.environ["LEDGER_URL"])
    return _ledger


@wurk.job(name="Outbox::Ship", retry=3)
def ship(number: int) -> None:
    found = Order.objects.filter(number=number).exists()  # committed: the push is a row of it
    ledger().rpush("runs", f"{number}:{'row' if found else 'no-row'}")
