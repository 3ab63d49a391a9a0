"""A disk push buffer file records the target of its pushes (``reliable.target_of``): the
server, db and key prefix, never a password; what only changes how a process connects (a
password, a user, an option) is the same target, so a redeployed successor adopts its
predecessor's files."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import wurk
from wurk.client.reliable import target_of, targets_of


@pytest.fixture(autouse=True)
def _no_redis_url(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("REDIS_URL", raising=False)  # it would win over redis_url
    yield


def identity(url: str, **settings: object) -> str:
    return target_of(wurk.Config(redis_url=url, **settings))["id"]


def test_what_only_changes_how_a_process_connects_is_the_same_target() -> None:
    plain = identity("redis://cache.example:6379/2")
    assert identity("redis://app:s3cret@CACHE.example:6379/2?socket_timeout=3") == plain
    assert identity("redis://cache.example/2") == plain  # the default port
    assert identity("redis://cache.example:6379?db=2") == plain
    assert identity("rediss://cache.example:6379/2") == plain
    assert identity("redis://localhost:7000/0") == identity("redis://127.0.0.1:7000")


@pytest.mark.parametrize("other", [
    {"url": "redis://cache.example:6379/3"},
    {"url": "redis://cache.example:6380/2"},
    {"url": "redis://queue.example:6379/2"},
    {"url": "redis://cache.example:6379/2", "key_prefix": "billing"},
])
def test_another_server_db_or_key_prefix_is_another_target(other: dict[str, str]) -> None:
    url = other.pop("url")
    assert identity(url, **other) != identity("redis://cache.example:6379/2")


def test_no_password_is_recorded_and_each_shard_has_its_target() -> None:
    config = wurk.Config(redis_url="redis://:hunter2@cache.example:6379/2", key_prefix="app",
                         shards={"eu": "redis://u:hunter3@eu.example:6379/0"})
    targets = targets_of(config)
    assert list(targets) == ["default", "eu"]
    assert "hunter" not in repr(targets)
    assert targets["default"]["redis"] == "redis://:***@cache.example:6379/2 (key_prefix 'app')"
    assert targets["eu"]["id"] == target_of(config.shard("eu"))["id"] != \
        targets["default"]["id"]
    assert targets_of(config.shard("eu")) == targets  # from a view: the configuration's own
