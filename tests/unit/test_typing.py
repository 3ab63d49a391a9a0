"""perform_async is typed against the job's own signature: mypy catches a wrong argument."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import wurk


def test_mypy_catches_a_wrong_argument(tmp_path: Path) -> None:
    source = tmp_path / "typed_use.py"
    source.write_text(textwrap.dedent("""
        import wurk

        @wurk.job
        def resize(image_id: int, size: str = "s") -> None: ...

        resize.perform_async(42)
        resize.perform_async(42, size="m")
        resize.perform_in(30, 42)
        resize.set(queue="low").perform_async(42)
        resize.perform_async("forty-two")
        resize.perform_async(42, colour="red")
        resize.perform_in(30, "x")
    """))
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(source)],
        capture_output=True, text=True,
    )
    errors = [line for line in result.stdout.splitlines() if ": error:" in line]
    assert [line.split(":")[1] for line in errors] == ["11", "12", "13"], result.stdout
    assert 'incompatible type "str"; expected "int"' in result.stdout
    assert 'Unexpected keyword argument "colour"' in result.stdout


def test_settings_are_typed_as_they_are_given(tmp_path: Path) -> None:
    """A strict mypy run of user code refused ``Config(statsd=("127.0.0.1", 8125))`` (typed
    text only) and ``reliable_push=True``, though both are taken; what is stored stays
    simple to read (``statsd`` as ``"host:port"``)."""
    source = tmp_path / "typed_settings.py"
    source.write_text(textwrap.dedent("""
        import wurk

        config = wurk.Config(statsd=("127.0.0.1", 8125), reliable_push=True)
        agent: tuple[str, int] = wurk.config.statsd_address(config.statsd or "")
        wurk.Config(statsd=8125)
    """))
    # the wurk under test, not the one the environment installed
    env = {**os.environ, "MYPYPATH": str(Path(wurk.__file__).parents[1])}
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(source)],
        capture_output=True, text=True, env=env,
    )
    errors = [line for line in result.stdout.splitlines() if ": error:" in line]
    assert [line.split(":")[1] for line in errors] == ["6"], result.stdout
