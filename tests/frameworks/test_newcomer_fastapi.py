"""docs/fastapi.md as pasted: ``main.py`` served by uvicorn in a temporary project takes
orders whose jobs its own worker runs, and shows the dashboard to the token only; the page's
``test_main.py`` passes under a bare pytest, with the HTTP client ``wurk[fastapi]`` brings."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import redis
from packaging.requirements import Requirement

from tests.helpers.server import free_port
from tests.system.conftest import ROOT, wait_for

PAGE = ROOT / "docs" / "fastapi.md"


def page_blocks() -> dict[str, str]:
    """The page's runnable blocks by the file name their first line gives."""
    text = PAGE.read_text(encoding="utf-8")
    found = re.findall(r"<!-- run by tests/frameworks/test_newcomer_fastapi\.py -->\n"
                       r"```python\n(# (\S+) .*?)```", text, re.DOTALL)
    return {name: code for code, name in found}


def request(url: str, *, body: dict[str, object] | None = None,
            headers: dict[str, str] | None = None) -> tuple[int, str]:
    data = None if body is None else json.dumps(body).encode()
    sent = urllib.request.Request(url, data=data, method="POST" if body is not None else "GET",
                                  headers={"content-type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(sent, timeout=10) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def project(tmp_path: Path) -> Path:
    folder = tmp_path / "shop"
    folder.mkdir()
    (folder / "pyproject.toml").write_text("[project]\nname = 'shop'\n")
    for name, code in page_blocks().items():
        (folder / name).write_text(code)
    return folder


def user_env() -> dict[str, str]:
    """The harness's REDIS_URL; nothing of this checkout on the path but the installed wurk."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return {**env, "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1"}


def test_main_py_serves_orders_whose_jobs_its_worker_runs(tmp_path: Path,
                                                          r: redis.Redis) -> None:
    folder = project(tmp_path)
    log = folder / "uvicorn.log"
    # A port free a moment ago may be taken by then (the suite's many outgoing connections
    # draw on the same ephemeral range): uvicorn then exits at startup and is started again.
    for _ in range(3):
        port = free_port()
        with log.open("w") as out:
            server = subprocess.Popen([str(Path(sys.executable).parent / "uvicorn"),
                                       "main:app", "--port", str(port)], cwd=folder,
                                      env=user_env(), stdout=out, stderr=subprocess.STDOUT)
        # uvicorn binds its socket after the application's startup: "running on" says it
        # listens ("Application startup complete" comes first, and a request then is refused)
        wait_for(lambda started=server: "Uvicorn running on" in log.read_text()
                 or started.poll() is not None, timeout=30, message="uvicorn's startup")
        if server.poll() is None or "address already in use" not in log.read_text():
            break
    base = f"http://127.0.0.1:{port}"
    try:
        assert server.poll() is None, log.read_text()
        status, text = request(f"{base}/orders", body={"id": 7})
        assert status == 200, text
        first = json.loads(text)["jid"]
        status, text = request(f"{base}/orders/8/charge", body={})
        assert status == 200, text
        second = json.loads(text)["jid"]
        assert len(first) == len(second) == 24
        wait_for(lambda: sorted(r.lrange("charged", 0, -1)) == ["7", "8"],
                 message="both charges, by the app's own worker")
        assert request(f"{base}/wurk/")[0] == 403
        status, text = request(f"{base}/wurk/", headers={"x-admin-token": "change-me"})
        assert status == 200 and "Dashboard" in text
        server.send_signal(signal.SIGINT)
        assert server.wait(30) == 0, log.read_text()
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(10)
    assert "Traceback" not in log.read_text()


def test_the_pages_test_passes_with_the_http_client_the_extra_brings(tmp_path: Path,
                                                                      r: redis.Redis) -> None:
    folder = project(tmp_path)
    env = {**user_env(), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}  # a bare pytest
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "--rootdir", str(folder), "test_main.py"], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout
    # What TestClient imports (httpx2, or httpx before Starlette 1.0) is in the extra.
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    block = re.search(r"^fastapi = \[(.*?)\]$", text, re.MULTILINE)
    assert block is not None
    names = {Requirement(spec).name for spec in re.findall(r'"([^"]+)"', block.group(1))}
    assert {"httpx2", "httpx", "fastapi"} <= names
    assert "wurk[web,embedded]" in block.group(1)
