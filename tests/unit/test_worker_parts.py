"""Worker parts that need no Redis: queue order, the busy map, the signal pipe, YAML config."""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from wurk.config import Capsule
from wurk.configfile import load_file
from wurk.errors import ConfigError
from wurk.fetch.basic import QueueOrder
from wurk.runtime.busy import Busy
from wurk.runtime.signals import SignalPipe


def test_strict_order_is_declaration_order_without_duplicates() -> None:
    order = QueueOrder(Capsule(queues=["a", "b", "a", "c"]))
    assert order() == ["a", "b", "c"]
    assert order(frozenset({"b"})) == ["a", "c"]


def test_weighted_order_puts_a_queue_first_in_proportion_to_its_weight() -> None:
    order = QueueOrder(Capsule(queues=["a,6", "b,3", "c,1"]))
    firsts = Counter(order()[0] for _ in range(20000))
    assert abs(firsts["a"] / 20000 - 0.6) < 0.03
    assert abs(firsts["b"] / 20000 - 0.3) < 0.03
    assert all(sorted(order()) == ["a", "b", "c"] for _ in range(100))


def test_random_order_is_uniform() -> None:
    order = QueueOrder(Capsule(queues=["a,1", "b,1"]))
    firsts = Counter(order()[0] for _ in range(10000))
    assert abs(firsts["a"] / 10000 - 0.5) < 0.04


def test_busy_map_entries_are_what_sidekiq_reads() -> None:
    busy = Busy()
    busy.add("t1", "default", b'{"class":"X","args":[]}')
    assert len(busy) == 1
    entry = json.loads(busy.snapshot()["t1"])
    assert entry["queue"] == "default" and entry["payload"] == '{"class":"X","args":[]}'
    assert isinstance(entry["run_at"], int) and abs(entry["run_at"] - time.time()) < 2
    busy.remove("t1")
    assert busy.snapshot() == {} and len(busy) == 0


def test_signal_pipe_turns_signals_into_names() -> None:
    pipe = SignalPipe(("USR2", "TTIN"))
    pipe.install()
    try:
        os.kill(os.getpid(), signal.SIGUSR2)
        os.kill(os.getpid(), signal.SIGTTIN)
        pipe.push("TSTP")
        received: list[str] = []
        deadline = time.monotonic() + 2
        while len(received) < 3 and time.monotonic() < deadline:
            received += pipe.wait(0.1)
        assert received == ["USR2", "TTIN", "TSTP"]
        assert pipe.wait(0.01) == []
    finally:
        pipe.close()
    assert signal.getsignal(signal.SIGUSR2) is signal.SIG_DFL


def test_a_push_after_the_pipe_is_closed_writes_nowhere() -> None:
    """Another thread may push after the worker has returned and closed its pipe (Django's
    reloader seeing a second change as the worker exits): the push must neither raise in
    that thread nor write into whatever descriptor now has the closed pipe's number."""
    pipe = SignalPipe(())
    pipe.close()
    # The lowest free descriptors are handed out first: most likely the closed pipe's.
    read, write = os.pipe()
    os.set_blocking(read, False)
    try:
        pipe.push("TERM")
        with pytest.raises(BlockingIOError):
            os.read(read, 64)  # nothing was written into the stranger
    finally:
        os.close(read)
        os.close(write)


def test_a_forked_child_closes_the_pipe_while_a_parents_thread_was_pushing() -> None:
    """A hosted swarm forks while a thread of the host may be pushing TERM (``request_stop``)
    into the supervisor's pipe; the child closes its copy first thing, and must not wait on
    the push's lock, which no thread of the child will ever release."""
    pipe = SignalPipe(())
    pushing, release = threading.Event(), threading.Event()

    def push_held() -> None:
        with pipe._guard():  # a push in progress holds this
            pushing.set()
            release.wait(30)

    holder = threading.Thread(target=push_held)
    holder.start()
    try:
        assert pushing.wait(10)
        pid = os.fork()
        if pid == 0:
            status = 1
            try:
                closed = threading.Event()
                threading.Thread(target=lambda: (pipe.close(), closed.set()),
                                 daemon=True).start()
                status = 0 if closed.wait(5) else 2
            finally:
                os._exit(status)
        _, status = os.waitpid(pid, 0)
    finally:
        release.set()
        holder.join(10)
        pipe.close()
    assert os.waitstatus_to_exitcode(status) == 0


def test_yaml_config_in_sidekiq_shape(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORKERS", "12")
    path = tmp_path / "wurk.yml"
    path.write_text("""
:concurrency: ${WORKERS}
timeout: 8
queues:
  - critical
  - [default, 2]
  - "low,1"
capsules:
  single:
    concurrency: 1
    queues: [unsafe]
tag: ${TAG:-fallback}
production:
  concurrency: 20
staging:
  concurrency: 2
swarm:
  count: 4
""")
    settings = load_file(path, "production")
    assert settings["concurrency"] == 20 and settings["timeout"] == 8
    assert settings["queues"] == ["critical", "default,2", "low,1"]
    assert settings["tag"] == "fallback" and settings["environment"] == "production"
    assert settings["swarm"] == {"count": 4}
    assert [(c.name, c.concurrency, c.queue_names) for c in settings["capsules"]] == [
        ("single", 1, ["unsafe"])]
    assert load_file(path)["concurrency"] == 12


def test_app_env_picks_the_section_without_e_and_a_missing_one_is_the_top_level(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Sidekiq takes the section its environment (APP_ENV) names; wurk read the variable
    only as a label, so a process reported "production" while running the top level."""
    path = tmp_path / "wurk.yml"
    path.write_text("concurrency: 12\nproduction:\n  concurrency: 20\nstaging:\n"
                    "  concurrency: 2\n")
    monkeypatch.delenv("WURK_ENV", raising=False)
    monkeypatch.setenv("APP_ENV", "production")
    assert load_file(path)["concurrency"] == 20
    monkeypatch.setenv("WURK_ENV", "staging")  # wurk's own wins
    settings = load_file(path)
    assert settings["concurrency"] == 2 and settings["environment"] == "staging"
    monkeypatch.setenv("WURK_ENV", "review-app")  # set for the whole app, not in the file
    settings = load_file(path)
    assert settings["concurrency"] == 12 and settings["environment"] == "review-app"
    with pytest.raises(ConfigError, match="no section 'review-app' for -e"):
        load_file(path, "review-app")  # named by -e: a typo is told
    assert load_file(path, "staging")["concurrency"] == 2


def test_environment_values_are_replaced_in_parsed_scalars_and_inject_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A variable is replaced inside the value it stands in: a newline, ``key: value`` or a
    flow mapping in the environment stays part of that one value and sets nothing else."""
    monkeypatch.setenv("TAG", "web\nconcurrency: 99\nlabels: [injected]")
    monkeypatch.setenv("LABEL", "a, b: {c: d}")
    monkeypatch.setenv("WORKERS", "7")
    monkeypatch.setenv("NESTED", "${WORKERS}")
    path = tmp_path / "wurk.yml"
    path.write_text("""
tag: ${TAG}
labels:
  - ${LABEL}
  - "quoted ${WORKERS}"
  - "${WORKERS}"
concurrency: ${WORKERS}
timeout: ${UNSET_TIMEOUT_X:-8.5}
environment: ${NESTED}
""")
    settings = load_file(path)
    assert settings["tag"] == "web\nconcurrency: 99\nlabels: [injected]"
    assert settings["labels"] == ["a, b: {c: d}", "quoted 7", "7"]  # quoted stays text
    assert settings["concurrency"] == 7 and settings["timeout"] == 8.5  # unquoted is typed
    assert settings["environment"] == "${WORKERS}"  # a value is never expanded twice


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("concurrency: [", "not valid YAML"),
        ("- a\n- b", "top level must be a mapping"),
        ("concurrencyy: 3", "unknown setting 'concurrencyy'"),
        ("queues: default", "queues must be a list"),
        ("queues: [[a, 1, 2]]", "queue entry"),
        ("capsules: {x: {threads: 2}}",
             "capsule 'x' takes concurrency, async_concurrency, queues and shard only"),
        ("tag: ${UNSET_VARIABLE_X}", "UNSET_VARIABLE_X is not set"),
        ("server_middleware: []", "unknown setting 'server_middleware'"),
    ],
)
def test_bad_config_files_name_the_problem(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.yml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_file(path)
    assert message in str(info.value) and str(path) in str(info.value)


def test_missing_config_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_file(tmp_path / "nope.yml")


def test_a_second_stop_signal_within_a_second_is_the_same_one_and_later_stops_now() -> None:
    """worker.md: a second TERM or INT during the stop's wait, a second or more after the
    first, stops now; a stop signal within a second of the first counts as the same one."""
    from wurk.runtime.signals import HURRY_AFTER, stop_watched

    class Stopping:
        def __init__(self) -> None:
            self.hurried = threading.Event()
            self.hurried_at: float | None = None
            self.hint = ""

        def quiet(self) -> None: ...

        def hurry(self) -> None:
            self.hurried_at = time.monotonic()
            self.hurried.set()

        def stop(self, timeout: float | None = None, *, hint: str = "") -> None:
            self.hint = hint
            pipe.push("INT")  # a process manager passing the same Ctrl-C on, at once
            assert not self.hurried.wait(HURRY_AFTER - 0.2), "the same stop hurried it"
            pipe.push("TERM")  # within a second of the first still: the same one
            time.sleep(0.4)  # a second and more after the first
            pipe.push("TERM")
            assert self.hurried.wait(2), "a second stop a second later did not hurry it"

    assert HURRY_AFTER == 1.0
    pipe = SignalPipe()
    launcher = Stopping()
    started = time.monotonic()
    try:
        stop_watched(launcher, pipe)
    finally:
        pipe.close()
    assert launcher.hurried_at is not None and launcher.hurried_at - started >= HURRY_AFTER
    assert "a second Ctrl-C (INT or TERM) stops now" in launcher.hint


def test_usr1_to_a_lone_worker_is_ignored_with_a_warning_not_in_silence(
        caplog: pytest.LogCaptureFixture) -> None:
    """worker.md: a signal the worker does not act on is ignored with a warning naming it.
    USR1 (a swarm's rolling restart) reaches a lone worker's loop, by ``kill`` or from the
    signals list, trapped: it said nothing, while its sender waited for a restart."""
    from wurk.runtime.signals import serve

    class Worker:
        stopped = quieted = False

        def quiet(self) -> None:
            self.quieted = True

        def hurry(self) -> None: ...

        def stop(self, timeout: float | None = None, *, hint: str = "") -> None:
            self.stopped = True

    caplog.set_level(logging.INFO, logger="wurk")
    pipe = SignalPipe()
    worker = Worker()
    pipe.push("USR1")  # as the heartbeat pushes a remote one; not warned of there
    pipe.push("TERM")
    try:
        serve(worker, pipe, tick=0.01)
    finally:
        pipe.close()
    assert worker.stopped and not worker.quieted
    assert any("USR1" in line and "ignor" in line for line in caplog.messages), \
        caplog.messages


def test_a_log_file_that_cannot_be_reopened_does_not_end_the_signal_loop(
        tmp_path: Path) -> None:
    """USR2 reopens the log file (after a rotation); a file that cannot be reopened (its
    directory gone, a rotation that left it unwritable) is reported, and the worker's
    main loop goes on obeying signals: the TERM read with it still stops the worker."""
    from wurk import log as wurk_log
    from wurk.runtime.signals import serve

    class Worker:
        stopped = False

        def quiet(self) -> None: ...

        def hurry(self) -> None: ...

        def stop(self, timeout: float | None = None, *, hint: str = "") -> None:
            self.stopped = True

    logs = tmp_path / "logs"
    logs.mkdir()
    wurk_log.setup(fmt="plain", logfile=str(logs / "wurk.log"))
    (logs / "wurk.log").unlink()
    logs.rmdir()  # reopening the file now fails
    pipe = SignalPipe()
    worker = Worker()
    pipe.push("USR2")
    pipe.push("TERM")
    try:
        serve(worker, pipe, tick=0.01)
    finally:
        pipe.close()
    assert worker.stopped
    wurk_log.logger.warning("still logging")  # to the old file: no line raises
    wurk_log.flush()


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("key_prefix: ${UNSET_PREFIX_X-app}", "${UNSET_PREFIX_X-app}"),
        ("web_password: ${UNSET_PASSWORD_X:?set it}", "${UNSET_PASSWORD_X:?set it}"),
        ("tag: ${UNSET_TAG_X:=web}", "${UNSET_TAG_X:=web}"),
        ("tag: ab${UNSET_TAG_X", "${UNSET_TAG_X"),
        ("redis_url: ${UNSET_URL_X:-${UNSET_FALLBACK_X}}", "${UNSET_FALLBACK_X"),
        ("labels: ['${WORKERS} ${WORKERS-2}']", "${WORKERS-2}"),
    ],
)
def test_a_substitution_of_another_form_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, fragment: str
) -> None:
    """Only ``${VAR}`` and ``${VAR:-default}`` are replaced; the shell's other forms (and a
    nested default, an unclosed brace) were kept as literal text, so ``key_prefix:
    ${PREFIX-app}`` ran on other keys and ``web_password: ${PASSWORD:?}`` set that password."""
    monkeypatch.setenv("WORKERS", "7")
    path = tmp_path / "wurk.yml"
    path.write_text(text + "\n")
    with pytest.raises(ConfigError) as info:
        load_file(path)
    message = str(info.value)
    assert str(path) in message and repr(fragment) in message
    assert "write ${NAME} or ${NAME:-default}" in message


def test_dollar_braces_that_name_no_variable_stay_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "wurk.yml"
    path.write_text("tag: 'a${}b $5 ${1x}'\nweb_username: u\nweb_password: 'p${ ${-'\n")
    settings = load_file(path)
    assert settings["tag"] == "a${}b $5 ${1x}" and settings["web_password"] == "p${ ${-"


def test_info_dumps_threads_as_ttin_does_where_the_system_has_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """INFO (Ctrl-T on BSD and macOS) logs every thread's backtrace, as
    TTIN does; it is trapped wherever the system has it (Linux has none)."""
    from wurk.runtime import signals

    class Worker:
        def quiet(self) -> None:
            raise AssertionError("INFO must not quiet the worker")

    dumps: list[str] = []
    monkeypatch.setattr(signals, "dump_threads", lambda: dumps.append("dump"))
    assert ("INFO" in signals.HANDLED) == hasattr(signal, "SIGINFO")
    assert signals.act_on(Worker(), "INFO") is False
    assert signals.act_on(Worker(), "TTIN") is False
    assert dumps == ["dump", "dump"]
