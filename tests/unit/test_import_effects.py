"""docs/design.md: "No import has a side effect." Importing every module of wurk registers
no exit or fork hook, installs no signal handler, starts no thread, touches no collector
setting and reads no environment variable; the hooks the reliable writer and the outbox
relay need are registered by the first of them made, once."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import wurk
from wurk.runtime import hooks

PACKAGE = str(Path(wurk.__file__).resolve().parent)

# Records each call of a process-wide hook, and each read of the environment, with the file
# that made it; imports every module of wurk (Django's models and views once Django is set
# up).
PROBE = r"""
import atexit, gc, importlib, json, os, pkgutil, signal, sys, threading, traceback
calls, environ_read, watching = [], [], [True]
def recorder(name, real):
    def record(*args, **kwargs):
        caller = traceback.extract_stack(limit=2)[0]
        calls.append([name, caller.filename, caller.lineno])
        return real(*args, **kwargs)
    return record
atexit.register = recorder("atexit.register", atexit.register)
os.register_at_fork = recorder("os.register_at_fork", os.register_at_fork)
signal.signal = recorder("signal.signal", signal.signal)
threading.Thread.start = recorder("threading.Thread.start", threading.Thread.start)
gc.freeze = recorder("gc.freeze", gc.freeze)
gc.set_threshold = recorder("gc.set_threshold", gc.set_threshold)
sys.setswitchinterval = recorder("sys.setswitchinterval", sys.setswitchinterval)
real_getitem = os._Environ.__getitem__
def getitem(self, key):
    if watching[0]:
        callers = [frame.filename for frame in traceback.extract_stack(limit=5)[:-1]]
        environ_read.append([key, callers])
    return real_getitem(self, key)
os._Environ.__getitem__ = getitem
import wurk
later, seen = [], 0
for found in pkgutil.walk_packages(wurk.__path__, "wurk."):
    if found.name.endswith("__main__"):
        continue  # runs the command line
    seen += 1
    try:
        importlib.import_module(found.name)
    except BaseException:
        later.append(found.name)  # Django's models and views: after django.setup()
# Django builds wurk's configuration when its app is ready (not an import): the
# environment is read then, by design; hooks are still watched.
watching[0] = False
import django
from django.conf import settings
settings.configure(INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth",
                                   "wurk.contrib.django"],
                   DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3",
                                          "NAME": ":memory:"}})
django.setup()
failed = []
for name in later:
    try:
        importlib.import_module(name)
    except BaseException as exc:
        failed.append([name, repr(exc)[:200]])
print(json.dumps({"calls": calls, "failed": failed, "seen": seen, "later": later,
                  "environ": environ_read}))
"""


def test_importing_every_module_of_wurk_has_no_process_wide_effect() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                          timeout=120, check=True)
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["failed"] == [] and report["seen"] > 100 and len(report["later"]) < 10
    ours = [call for call in report["calls"] if call[1].startswith(PACKAGE)]
    assert ours == []
    # ... and reads no environment variable (REDIS_URL and the rest: when a configuration
    # is built, never at import)
    read = [key for key, callers in report["environ"]
            if any(caller.startswith(PACKAGE) for caller in callers)]
    assert read == []


def test_process_hooks_are_registered_once_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    registered: list[tuple[str, Any]] = []
    monkeypatch.setattr("wurk.runtime.hooks.atexit.register",
                        lambda hook: registered.append(("exit", hook)))
    monkeypatch.setattr("wurk.runtime.hooks.os.register_at_fork",
                        lambda *, after_in_child: registered.append(("fork", after_in_child)))
    monkeypatch.setattr(hooks, "_claimed", {})

    def child() -> None: ...

    def leaving() -> None: ...

    assert hooks.install("probe", after_fork_in_child=child, at_exit=leaving)
    assert not hooks.install("probe", after_fork_in_child=child, at_exit=leaving)
    assert registered == [("fork", child), ("exit", leaving)] and hooks.installed("probe")


def test_a_reliable_writer_and_an_outbox_relay_hook_the_process_when_first_made(
        tmp_path: Path) -> None:
    """In a fresh interpreter: after the imports no hook of theirs; after the first reliable
    writer and the first relay, theirs."""
    probe = r"""
import json, wurk
from wurk.client import outbox, reliable
from wurk.runtime import hooks
before = [hooks.installed(reliable.__name__), hooks.installed(outbox.__name__)]
config = wurk.Config(redis_url="redis://127.0.0.1:1", reliable_push="memory")
reliable.writer_for(config)
class Store:
    def relay(self, limit, lease, push):
        return 0
outbox.Relay(config, Store())
print(json.dumps([before, [hooks.installed(reliable.__name__), hooks.installed(outbox.__name__)]]))
"""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60, check=True, cwd=tmp_path)
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [[False, False], [True, True]]
