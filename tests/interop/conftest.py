"""Fixtures the live Ruby tests share."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.ruby import Processes


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    """Subprocesses (Ruby's and wurk's) a test starts, stopped at its end."""
    started = Processes(tmp_path)
    yield started
    started.stop()
