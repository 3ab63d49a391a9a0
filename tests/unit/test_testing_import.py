"""``import wurk`` brings ``wurk.testing`` with it, switching nothing and loading neither
pytest nor the testing package's pytest plugin."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_wurk_testing_works_after_import_wurk_alone() -> None:
    out = run("""
        import wurk

        @wurk.job(name="resize")
        def resize(image_id: int) -> int:
            return image_id * 2

        with wurk.testing.fake():
            resize.perform_async(21)
            assert [job["args"] for job in wurk.testing.jobs()] == [[21]]
            assert resize.drain() == 1
        with wurk.testing.inline():
            assert resize.perform_async(4) is not None
        print(wurk.testing.mode())
    """)
    assert out.strip() == "disable"


def test_importing_wurk_switches_no_mode_and_loads_no_pytest() -> None:
    out = run("""
        import sys
        import wurk
        from wurk.client import writers

        assert "wurk.testing" in sys.modules and wurk.testing is sys.modules["wurk.testing"]
        assert writers.selected() is None and wurk.testing.mode() == "disable"
        try:
            writers.kept()
        except RuntimeError:
            pass
        else:
            raise AssertionError("the fake store was registered at import")
        print(sorted(m for m in sys.modules if m == "pytest" or m.startswith(("_pytest",
                                                                              "wurk.testing."))))
    """)
    assert out.strip() == "['wurk.testing.run', 'wurk.testing.store']"
