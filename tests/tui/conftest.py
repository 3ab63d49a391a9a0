"""The terminal UI's tests: a Redis holding jobs in every state (``tests.tui.world``); the
pilot that drives the app is in ``tests.tui.drive``."""

from __future__ import annotations

import os

import pytest
import redis

import wurk
from tests.tui.world import World, seed


@pytest.fixture
def world(config: wurk.Config, r: redis.Redis) -> World:
    return seed(config, redis.Redis.from_url(os.environ["REDIS_URL"]))
