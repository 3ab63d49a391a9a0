"""perform_async is typed against the job's own signature: mypy catches a wrong argument."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path


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
