"""The README's first screen does what it says, pasted as it is: its "Use it" script and
commands run as subprocesses in a subfolder of a project (against the harness's Redis)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from tests.system.conftest import ROOT, wait_for

README = (ROOT / "README.md").read_text()


def section(title: str) -> str:
    start = README.index(f"## {title}\n")
    return README[start:README.index("\n## ", start + 1)]


def blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, re.DOTALL)


def commands(block: str) -> list[list[str]]:
    return [line.split("#")[0].split() for line in block.splitlines() if line.strip()]


def test_try_it_says_how_to_reach_the_wurk_command() -> None:
    text = " ".join(section("Try it").split())
    assert "`. .venv/bin/activate` first (or call `.venv/bin/wurk`), then `wurk server status`" \
        in text


def test_use_it_runs_as_pasted(tmp_path: Path, r: redis.Redis) -> None:
    app = tmp_path / "proj" / "app"
    app.mkdir(parents=True)
    (tmp_path / "proj" / "pyproject.toml").write_text("")
    use_it = section("Use it")
    (script,) = blocks(use_it, "python")
    install, shell = blocks(use_it, "sh")
    assert install.split("#")[0].split() == ["pip", "install", "'wurk[embedded]'"]
    (app / "jobs.py").write_text(script)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    bin_dir = Path(sys.executable).parent

    pushed = subprocess.run([sys.executable, "jobs.py"], cwd=app, env=env, capture_output=True,
                            text=True, timeout=60)
    assert pushed.returncode == 0, pushed.stderr
    assert (r.llen("queue:critical"), r.llen("queue:low"), r.llen("queue:default")) == (4, 1, 2)
    assert r.zcard("schedule") == 1

    worker_line, stats_line, _, enqueue_line = commands(shell)
    log = (app / "worker.log").open("w")
    worker = subprocess.Popen([str(bin_dir / worker_line[0]), *worker_line[1:]], cwd=app,
                              env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        # Queues empty is not enough: jobs fetched ahead may still be waiting their turn.
        wait_for(lambda: r.hget("visits", "/home") == "1" and (app / "worker.log").read_text()
                 .count("class=resize ") >= 5, message="the README's jobs ran")
        wait_for(lambda: r.zcard("retry") == 1, message="RubyJob (no Python job) to retry")
        stats = subprocess.run([str(bin_dir / stats_line[0]), *stats_line[1:]], cwd=app,
                               env=env, capture_output=True, text=True, timeout=60)
        assert stats.returncode == 0, stats.stderr
        assert stats.stdout.splitlines()[0].split(None, 1) == ["Redis", os.environ["REDIS_URL"]]
        # "wurk retries clear deletes it" (--yes: no terminal here to answer its question)
        retry_entry = r.zrange("retry", 0, -1)[0]
        assert '"class":"RubyJob"' in retry_entry and "JobNotRegistered" in retry_entry
        clear = re.search(r"`(wurk retries clear)` deletes it", " ".join(use_it.split()))
        assert clear is not None
        cleared = subprocess.run([str(bin_dir / "wurk"), *clear.group(1).split()[1:], "--yes"],
                                 cwd=app, env=env, capture_output=True, text=True, timeout=60)
        assert cleared.returncode == 0, cleared.stderr
        assert r.zcard("retry") == 0
        # The shell push knows the job through -r: its own queue, its arguments checked.
        pushed_one = subprocess.run([str(bin_dir / enqueue_line[0]), *enqueue_line[1:]],
                                    cwd=app, env=env, capture_output=True, text=True,
                                    timeout=60)
        assert pushed_one.returncode == 0, pushed_one.stderr
        (entry,) = [e for e in r.zrange("schedule", 0, -1) if pushed_one.stdout.strip() in e]
        assert '"queue":"critical"' in entry and '"args":[42]' in entry
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0
        log.close()
    output = (app / "worker.log").read_text()
    # Ten threads print at once, so a job's "resizing" and its id may be split by another
    # line: count them rather than read them whole.
    assert output.count("resizing") == 5
    assert len(re.findall(r"class=resize .*?INFO: done", output)) == 5


def test_a_wrong_argument_is_refused_as_the_readme_says(tmp_path: Path, r: redis.Redis) -> None:
    use_it = section("Use it")
    (script,) = blocks(use_it, "python")
    claimed = re.search(r"`wurk\.InvalidArguments: ([^`]+)`", " ".join(use_it.split()))
    call = re.search(r"\(`(resize\.perform_async\(\))` raises", use_it)
    assert claimed is not None and call is not None
    (tmp_path / "jobs.py").write_text(script)
    done = subprocess.run([sys.executable, "-c", f"import jobs; jobs.{call.group(1)}"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == f"wurk.InvalidArguments: {claimed.group(1)}"
    assert r.dbsize() == 0  # nothing pushed


@pytest.mark.timeout(360)  # real time, 25-60 s here: more on a slower machine
def test_the_first_commands_make_a_venv_left_without_pip_again(tmp_path: Path) -> None:
    """On a Debian without python3-venv, ``python3 -m venv`` stops half-way: a ``.venv`` with
    a python and no pip. Once the package is installed, running the command again must not
    fail with "No module named pip": the half-made ``.venv`` is made again."""
    for script in ("demo", "test"):
        project = tmp_path / script
        (project / "scripts").mkdir(parents=True)
        for part in (script, "lib.sh"):  # lib.sh: the shell functions scripts/test sources
            (project / "scripts" / part).write_bytes((ROOT / "scripts" / part).read_bytes())
        (project / "pyproject.toml").write_text("not toml: the install after the venv fails\n")
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(project / ".venv")],
                       check=True, timeout=60)
        done = subprocess.run(["bash", str(project / "scripts" / script)], cwd=project,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode != 0 and "No module named pip" not in done.stderr, done.stderr
        pip = subprocess.run([str(project / ".venv" / "bin" / "python"), "-m", "pip",
                              "--version"], capture_output=True, text=True, timeout=60)
        assert pip.returncode == 0, pip.stderr
