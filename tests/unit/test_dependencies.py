"""The redis-py range wurk declares is one that is tested: bounded at both ends, with a
floor the code runs on (``scripts/test-lowest`` runs the Redis-facing tests there)."""

from __future__ import annotations

import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]


def dependencies() -> dict[str, Requirement]:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    block = re.search(r"^dependencies = \[(.*?)^\]", text, re.S | re.M)
    assert block is not None
    found = [Requirement(m) for m in re.findall(r'^\s*"([^"]+)"', block.group(1), re.M)]
    return {r.name: r for r in found}


def bounds(requirement: Requirement) -> tuple[Version, Version]:
    low = [Version(s.version) for s in requirement.specifier if s.operator == ">="]
    high = [Version(s.version) for s in requirement.specifier if s.operator == "<"]
    assert low and high, f"{requirement} must be bounded at both ends"
    return low[0], high[0]


def test_redis_py_and_hiredis_are_pinned_to_a_tested_range() -> None:
    deps = dependencies()
    low, _ = bounds(deps["redis"])
    # 5.3 is the first whose pool lends a connection without a command name (the lease).
    assert low >= Version("5.3")
    assert "hiredis" in deps["redis"].extras
    # wurk imports hiredis itself (the lease packs commands with it): a direct dependency.
    hiredis_low, _ = bounds(deps["hiredis"])
    assert hiredis_low >= Version("3.0")  # what redis-py 5.3's hiredis extra asks for


def test_the_installed_versions_are_inside_the_declared_range() -> None:
    for name in ("redis", "hiredis"):
        low, high = bounds(dependencies()[name])
        assert low <= Version(version(name)) < high, f"{name} {version(name)}"


def test_ci_runs_the_floor_of_the_range() -> None:
    # CI runs the README's one test command, which ends with the floor's run.
    assert "./scripts/test\n" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "./scripts/test-lowest" in (ROOT / "scripts" / "test").read_text(encoding="utf-8")
    lowest = (ROOT / "scripts" / "test-lowest").read_text(encoding="utf-8")
    assert "scripts/floors.py 'redis[hiredis]' hiredis uvloop" in lowest


def floors(*names: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "floors.py"), *names],
                          capture_output=True, text=True, timeout=60, check=False)


def test_the_floor_scripts_install_the_lower_bound_pyproject_declares() -> None:
    # scripts/test-lowest and scripts/test-floors pin what this prints.
    done = floors("redis[hiredis]", "hiredis", "fastapi", "psycopg[binary]")
    assert done.returncode == 0, done.stderr
    redis_low, _ = bounds(dependencies()["redis"])
    hiredis_low, _ = bounds(dependencies()["hiredis"])
    assert done.stdout.split() == [f"redis[hiredis]=={redis_low}", f"hiredis=={hiredis_low}",
                                   "fastapi==0.115.2", "psycopg[binary]==3.1.8"]


def test_a_name_with_no_floor_is_refused_by_name() -> None:
    done = floors("click", "no-such-package")
    assert done.returncode != 0 and done.stdout == ""
    assert "pyproject.toml pins no lower bound for no-such-package" in done.stderr
