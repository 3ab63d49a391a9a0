"""The terminal UI's tests: a Redis holding jobs in every state (``tests.tui.world``); the
pilot that drives the app is in ``tests.tui.drive``."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import redis

import wurk
from tests.tui.world import World, seed


@pytest.fixture
def world(config: wurk.Config) -> Iterator[World]:
    """The world, seeded afresh for each test (a few milliseconds: the harness flushes the
    server before every test, and most tests here change what they act on)."""
    client = redis.Redis.from_url(os.environ["REDIS_URL"])
    yield seed(config, client)
    client.close()
