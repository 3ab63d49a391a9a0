"""A processor's guard withdraws what it sent without leaving the interpreter stuck.

CPython 3.11 keeps an interpreter-wide "exception pending" flag set when a pending thread
exception is cleared through the C API with NULL; a thread under a profiler then spins at its
next function entry for good (a ``profile=`` job after any time limit or cancel hung that way).
Each case runs in a subprocess, so a regression is a timeout here, not a hung suite."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

PRELUDE = textwrap.dedent("""
    import sys, threading, time
    from wurk.control.stops import CancelRaised, Guard
    from wurk.errors import Shutdown

    def profiled_calls():
        # What a profiler or tracer does to a thread; with the flag stuck this never returns.
        sys.setprofile(lambda *args: None)
        try:
            for _ in range(1000):
                (lambda: None)()
        finally:
            sys.setprofile(None)

    def spin(seconds):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            pass
""")

CASES = {
    "a stop raised in the body, then the body closed": """
        guard = Guard()
        raised = []
        def job():
            guard.ident = threading.get_ident()
            guard.enter(); guard.open_body()
            try:
                spin(30)
            except CancelRaised:
                raised.append(True)
            finally:
                guard.close_body(); guard.leave()
        thread = threading.Thread(target=job); thread.start()
        while not guard.stop_body(CancelRaised, guard.run):
            time.sleep(0.01)
        thread.join(20)
        assert raised == [True] and not thread.is_alive()
    """,
    "a shutdown raised in the frame, then the frame left": """
        guard = Guard()
        raised = []
        def job():
            guard.ident = threading.get_ident()
            guard.enter()
            try:
                spin(30)
            except Shutdown:
                raised.append(True)
            finally:
                assert guard.leave()
        thread = threading.Thread(target=job); thread.start()
        while not guard.interrupt():
            time.sleep(0.01)
        thread.join(20)
        assert raised == [True] and not thread.is_alive()
    """,
    "a stop withdrawn before it was raised": """
        guard = Guard()
        guard.ident = threading.get_ident()
        guard.enter(); guard.open_body()
        with guard._lock:  # what stop_body does, from this very thread, raised nowhere yet
            guard._pending = CancelRaised
        guard.close_body(); guard.leave()
    """,
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_profiled_thread_runs_after_the_guard_withdrew(case: str) -> None:
    script = PRELUDE + textwrap.dedent(CASES[case]) + "\nprofiled_calls()\nprint('ran')\n"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "ran", done.stderr
