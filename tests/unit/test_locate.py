"""``wurk.connections.locate``: ``find_home``, the embedded server's directory, found as git
finds ``.git``; ``describe_url``, a URL as logs and errors show it."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from wurk.connections.home import PROJECT_MARKERS, find_home
from wurk.connections.locate import describe_url
from wurk.connections.replies import unavailable


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """``root/`` (a project: pyproject.toml) with ``root/a/b/c``; returns ``root``."""
    root = tmp_path / "root"
    (root / "a" / "b" / "c").mkdir(parents=True)
    (root / "pyproject.toml").write_text("")
    return root


def test_no_home_yet_goes_to_the_project_root(tree: Path) -> None:
    assert find_home(".wurk", tree / "a" / "b" / "c") == tree / ".wurk"


def test_the_nearest_existing_home_wins(tree: Path) -> None:
    (tree / ".wurk").mkdir()
    (tree / "a" / ".wurk").mkdir()
    assert find_home(".wurk", tree / "a" / "b" / "c") == tree / "a" / ".wurk"
    assert find_home(".wurk", tree) == tree / ".wurk"


def test_a_home_above_the_project_root_is_not_used(tree: Path) -> None:
    (tree.parent / ".wurk").mkdir()  # a stray one, e.g. ~/.wurk
    assert find_home(".wurk", tree / "a") == tree / ".wurk"


@pytest.mark.parametrize("marker", PROJECT_MARKERS)
def test_every_marker_makes_a_project_root(tmp_path: Path, marker: str) -> None:
    inner = tmp_path / "p" / "q"
    inner.mkdir(parents=True)
    target = tmp_path / "p" / marker
    if marker.startswith("."):
        target.mkdir()
    else:
        target.write_text("")
    assert find_home(".wurk", inner) == tmp_path / "p" / ".wurk"


def test_a_path_is_used_as_given(tree: Path) -> None:
    (tree / ".wurk").mkdir()
    here = tree / "a"
    assert find_home("./.wurk", here) == here / ".wurk"
    assert find_home("data/wurk", here) == here / "data" / "wurk"
    assert find_home(str(tree / "x"), here) == tree / "x"


@pytest.mark.parametrize(("url", "shown"), [
    ("redis://h:6379/0?password=s3cret", "redis://h:6379/0?password=***"),
    ("rediss://app:pw@h:6380/1?ssl_cert_reqs=none&ssl_password=keypw",
     "rediss://app:***@h:6380/1?ssl_cert_reqs=none&ssl_password=***"),
    ("redis://:pw@[::1]:6379/0", "redis://:***@[::1]:6379/0"),
    ("redis://:pw@[::1]/0", "redis://:***@[::1]/0"),
    ("unix:///run/redis.sock?password=s3cret&db=2", "unix:///run/redis.sock?password=***&db=2"),
    ("unix://:pw@/run/redis.sock", "unix://:***@/run/redis.sock"),
    ("redis://h:6379/0", "redis://h:6379/0"),
    ("redis://app@h:6379/0", "redis://app@h:6379/0"),
    ("localhost:6379", "localhost:6379"),
])
def test_a_url_is_shown_without_any_password_and_otherwise_as_written(url: str,
                                                                      shown: str) -> None:
    assert describe_url(url) == shown
    assert unavailable(redis.ConnectionError("refused"), url).args[0] == f"{shown}: refused"
