"""The Redis a benchmark runs against: ``REDIS_URL`` if set, else a private server."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@contextmanager
def redis_url() -> Iterator[str]:
    url = os.environ.get("REDIS_URL")
    if url:
        yield url
        return
    sys.path.insert(0, str(ROOT))
    from tests.helpers.server import start_server

    server = start_server(Path(tempfile.mkdtemp(prefix="wurk-bench-")))
    try:
        yield server.url
    finally:
        server.stop()
