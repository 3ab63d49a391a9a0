"""The worker's log handlers: context on every line, formats, flushing by time, reopen."""

from __future__ import annotations

import io
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers.threads import race
from wurk import log as wurk_log


@pytest.fixture(autouse=True)
def _restore() -> object:
    yield
    for handler in list(wurk_log.logger.handlers):
        wurk_log.logger.removeHandler(handler)
    wurk_log.logger.propagate = True


def test_job_context_reaches_every_line_in_json() -> None:
    stream = io.StringIO()
    wurk_log.setup(fmt="json", stream=stream)
    with wurk_log.job_context({"class": "X", "jid": "abc", "queue": "q"}):
        wurk_log.info("done: %.3f sec", 0.25)
        logging.getLogger("wurk.cli.examples").warning("from a job")
    wurk_log.flush()
    first, second = (json.loads(line) for line in stream.getvalue().splitlines())
    assert first["msg"] == "done: 0.250 sec" and first["lvl"] == "INFO"
    assert first["ctx"] == {"class": "X", "jid": "abc", "queue": "q"}
    assert second["ctx"]["jid"] == "abc" and second["lvl"] == "WARNING"
    assert first["tid"] == wurk_log.tid()


def test_pretty_and_plain_lines() -> None:
    stream = io.StringIO()
    wurk_log.setup(fmt="pretty", stream=stream)
    with wurk_log.job_context({"class": "X", "tags": ["a", "b"]}):
        wurk_log.info("start")
    wurk_log.flush()
    line = stream.getvalue().strip()
    assert line.endswith("class=X tags=a,b INFO: start") and line[:4].isdigit()
    stream = io.StringIO()
    wurk_log.setup(fmt="plain", stream=stream)
    wurk_log.info("x")
    wurk_log.flush()
    assert stream.getvalue().startswith("pid=")


def test_lines_are_flushed_by_time_and_warnings_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    flushes: list[int] = []

    class Counting(io.StringIO):
        def flush(self) -> None:
            flushes.append(1)

    stream = Counting()
    wurk_log.setup(fmt="plain", stream=stream)
    with wurk_log.job_context({"class": "X", "jid": "abc", "queue": "q"}):
        for _ in range(100):
            wurk_log.info("line")
    assert len(flushes) <= 2  # a burst of job lines is written with at most a flush or two
    wurk_log.logger.warning("now")
    assert len(flushes) >= 1 and stream.getvalue().count("\n") == 101


class _CountingWrites(io.StringIO):
    """A stream that writes through on every call, as ``PYTHONUNBUFFERED=1`` makes stdout."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        return super().write(text)


JOB = {"class": "X", "jid": "abc", "queue": "q"}


def test_a_burst_of_job_lines_is_one_write_even_on_an_unbuffered_stream() -> None:
    stream = _CountingWrites()
    wurk_log.setup(fmt="plain", stream=stream)
    wurk_log.info("booted")  # outside a job: written at once (read in order with others)
    assert stream.writes == 1
    with wurk_log.job_context(JOB):
        for _ in range(100):
            wurk_log.info("done")
        assert stream.writes == 1 and stream.getvalue().count("\n") == 1  # kept
        wurk_log.logger.warning("now")  # a warning writes what was kept, and itself
        assert stream.writes == 2 and stream.getvalue().count("\n") == 102
        wurk_log.info("last")
    wurk_log.flush()  # the launcher's flusher, when idle and at exit
    assert stream.writes == 3 and stream.getvalue().endswith("INFO: last\n")
    wurk_log.info("stopping")
    assert stream.writes == 4  # outside a job again: at once


def test_kept_lines_are_written_by_time_by_size_and_at_close(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # worker.md: job lines are written at most a quarter-second apart; at most 500 wait.
    assert (wurk_log.FLUSH_INTERVAL, wurk_log.BUFFER_LINES) == (0.25, 500)
    stream = _CountingWrites()
    handler = wurk_log.setup(fmt="plain", stream=stream)
    wurk_log.info("start")
    with wurk_log.job_context(JOB):
        wurk_log.info("kept")
        assert stream.getvalue().count("\n") == 1
        monkeypatch.setattr(wurk_log, "FLUSH_INTERVAL", 0.0)  # the interval has run out
        wurk_log.info("due")
        assert stream.getvalue().count("\n") == 3
        monkeypatch.setattr(wurk_log, "FLUSH_INTERVAL", 3600.0)
        monkeypatch.setattr(wurk_log, "BUFFER_LINES", 4)
        for _ in range(10):
            wurk_log.info("x" * 50)
        assert stream.getvalue().count("\n") == 3 + 8  # written each time four waited
        wurk_log.info("at close")
    handler.close()
    assert stream.getvalue().endswith("INFO: at close\n")
    path = tmp_path / "file.log"
    handler = wurk_log.setup(fmt="plain", logfile=str(path))
    wurk_log.info("w")
    with wurk_log.job_context(JOB):
        wurk_log.info("kept for the file")
    handler.close()
    assert path.read_text().endswith("INFO: kept for the file\n")
    stream = _CountingWrites()
    handler = wurk_log.setup(fmt="plain", stream=stream)
    with wurk_log.job_context(JOB):
        wurk_log.info("kept")
    stream.close()  # its owner closed it first (a test's captured stdout, say)
    handler.close()  # no error: nothing left to write to


def test_lines_from_many_threads_are_each_written_once_whole_and_in_each_threads_order(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Threads keep their lines without the handler's lock while others flush: none is lost,
    doubled or torn, and each thread's come out in the order it logged them."""
    monkeypatch.setattr(wurk_log, "BUFFER_LINES", 7)  # many flushes, from every thread
    stream = io.StringIO()
    wurk_log.setup(fmt="plain", stream=stream)
    threads_, lines_each = 8, 2_000

    def log(n: int) -> None:
        with wurk_log.job_context({"class": "X", "jid": f"t{n}", "queue": "q"}):
            for i in range(lines_each):
                wurk_log.info("line %d", i)

    race(log, threads_, against=wurk_log.flush)  # the launcher's idle flush, racing theirs
    wurk_log.flush()
    seen: dict[str, list[int]] = {}
    for text in stream.getvalue().splitlines():
        jid = text.split(" jid=")[1].split(" ")[0]
        seen.setdefault(jid, []).append(int(text.rsplit("INFO: line ", 1)[1]))
    assert seen == {f"t{n}": list(range(lines_each)) for n in range(threads_)}


def test_a_kept_line_shows_when_and_where_it_was_logged_not_when_written(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wurk_log, "FLUSH_INTERVAL", 3600.0)
    stream = io.StringIO()
    wurk_log.setup(fmt="pretty", stream=stream)
    wurk_log.info("booted")  # outside a job: written at once, and the interval starts now
    booted = stream.getvalue()
    logged_in: list[str] = []

    def job() -> None:
        logged_in.append(wurk_log.tid())
        with wurk_log.job_context(JOB):
            wurk_log.info("done")

    monkeypatch.setattr(time, "time", lambda: 1_700_000_000.125)
    worker = threading.Thread(target=job)
    worker.start()
    worker.join()
    assert stream.getvalue() == booted  # kept
    monkeypatch.setattr(time, "time", lambda: 1_700_000_100.5)
    wurk_log.flush()  # written from this thread, later
    assert stream.getvalue() == booted + (f"2023-11-14T22:13:20.125Z pid={os.getpid()} "
                                          f"tid={logged_in[0]} class=X jid=abc queue=q "
                                          f"INFO: done\n")
    assert logged_in[0] != wurk_log.tid()


def test_a_kept_line_that_cannot_be_rendered_is_reported_and_the_rest_written(
        capsys: pytest.CaptureFixture[str]) -> None:
    class Unprintable:
        def __str__(self) -> str:
            raise ValueError("no text for this")

    stream = io.StringIO()
    wurk_log.setup(fmt="plain", stream=stream)
    with wurk_log.job_context(JOB):
        wurk_log.info("before")
    with wurk_log.job_context({"class": Unprintable()}):
        wurk_log.info("broken")
    with wurk_log.job_context(JOB):
        wurk_log.info("after")
    wurk_log.flush()
    lines = stream.getvalue().splitlines()
    assert [line.rsplit(": ", 1)[1] for line in lines] == ["before", "after"]
    assert "no text for this" in capsys.readouterr().err  # logging's report of a failure


def test_logfile_is_reopened_after_rotation(tmp_path: Path) -> None:
    path = tmp_path / "wurk.log"
    wurk_log.setup(fmt="plain", logfile=str(path))
    wurk_log.logger.warning("before")
    path.rename(tmp_path / "wurk.log.1")
    wurk_log.reopen()
    wurk_log.logger.warning("after")
    wurk_log.flush()
    assert "before" in (tmp_path / "wurk.log.1").read_text()
    assert "after" in path.read_text() and "before" not in path.read_text()


HOSTILE_CONTEXT = {"class": "Evil\nINFO: forged line", "jid": "a b=c", "queue": "q\x00\x1b[2J",
                   "tags": ["x\u2028y", "\u202eevil"]}


@pytest.mark.parametrize("fmt", ["pretty", "plain", "json"])
def test_payload_fields_cannot_forge_or_repaint_a_line(fmt: str) -> None:
    stream = io.StringIO()
    wurk_log.setup(fmt=fmt, stream=stream)
    with wurk_log.job_context(HOSTILE_CONTEXT):
        wurk_log.info("done: %s", "x\ny\r\x00")
        logging.getLogger("wurk").warning("no job named %s", "A\nB")
    wurk_log.flush()
    text = stream.getvalue()
    lines = text.split("\n")[:-1]
    assert len(lines) == 2  # one record, one line
    for bad in ("\x00", "\x1b", "\r", "\u2028", "\u202e"):
        assert bad not in text
    if fmt == "json":
        first = json.loads(lines[0])
        assert first["ctx"]["class"] == HOSTILE_CONTEXT["class"]  # escaped, not changed
        assert first["ctx"]["tags"] == HOSTILE_CONTEXT["tags"]
        assert first["msg"] == "done: x\ny\r\x00"
    else:
        assert 'class="Evil\\nINFO: forged line" jid="a b=c" queue=q\\x00\\x1b[2J' in lines[0]
        assert lines[0].endswith("INFO: done: x\\ny\\r\\x00")
        assert lines[1].endswith("WARNING: no job named A\\nB")


def test_a_thread_dump_keeps_its_lines() -> None:
    from wurk.runtime.signals import dump_threads

    stream = io.StringIO()
    wurk_log.setup(fmt="pretty", stream=stream)
    dump_threads()
    wurk_log.flush()
    assert "thread MainThread" in stream.getvalue()
    assert stream.getvalue().count("\n") > len(__import__("threading").enumerate())


CONTEXTS = [
    {"class": "BenchIncr", "jid": "0123456789abcdef01234567", "queue": "default"},
    {"class": "X", "tags": ["a", "b"], "bid": None, "n": 3},
    {"class": "", "jid": "a b=c", "queue": 'say "hi"'},
    HOSTILE_CONTEXT,
]


def _counting(write: Callable[..., None], calls: list[int]) -> Callable[..., None]:
    def counted(level: int, message: str, args: tuple[object, ...] = ()) -> None:
        calls.append(1)
        write(level, message, args)
    return counted


@pytest.mark.parametrize("fmt", ["pretty", "plain", "json"])
@pytest.mark.parametrize("ctx", CONTEXTS, ids=["plain", "typed", "quoted", "hostile"])
def test_the_direct_path_writes_what_the_record_path_writes(
    fmt: str, ctx: dict[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``line`` skips the LogRecord while the handler is ours alone; the text must not
    change. The clock is held still so both lines carry the same timestamp."""
    monkeypatch.setattr(time, "time", lambda: 1_700_000_000.25)
    texts = []
    for direct in (True, False):
        stream = io.StringIO()
        handler = wurk_log.setup(fmt=fmt, stream=stream)
        writes: list[int] = []
        assert isinstance(handler, wurk_log.BufferedStreamHandler)
        monkeypatch.setattr(handler, "write_line", _counting(handler.write_line, writes))
        if not direct:
            handler.addFilter(lambda record: True)  # anything of the user's: the full path
        with wurk_log.job_context(ctx):
            wurk_log.info("done: %.3f sec", 0.25)
        wurk_log.flush()
        assert writes == ([1] if direct else [])
        texts.append(stream.getvalue())
    assert texts[0] == texts[1] and texts[0].count("\n") == 1


def test_anything_of_the_users_on_the_wurk_logger_sees_every_line() -> None:
    """A second handler, a logger filter or a format of the user's: each gets the record."""
    seen: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record)

    stream = io.StringIO()
    handler = wurk_log.setup(fmt="pretty", stream=stream)
    wurk_log.logger.addHandler(Keep())
    wurk_log.info("one")
    wurk_log.logger.handlers.pop()
    wurk_log.logger.addFilter(lambda record: not seen.append(record))  # type: ignore[func-returns-value]
    wurk_log.info("two")
    wurk_log.logger.filters.clear()
    handler.setFormatter(logging.Formatter("custom %(message)s"))
    wurk_log.info("three")
    wurk_log.flush()
    assert [record.getMessage() for record in seen] == ["one", "two"]
    assert stream.getvalue().splitlines()[-1] == "custom three"


def test_a_broken_stream_on_the_direct_path_is_reported_not_raised(
    capsys: pytest.CaptureFixture[str],
) -> None:
    class Broken(io.StringIO):
        def write(self, text: str) -> int:
            raise OSError("disk full")

    wurk_log.setup(fmt="pretty", stream=Broken())
    wurk_log.info("lost line")  # outside a job: written at once, and the write fails
    assert "disk full" in capsys.readouterr().err


def test_a_forked_child_writes_its_own_pid(tmp_path: Path) -> None:
    """The direct path keeps the process id rather than asking the kernel for each line; a
    child forked after ``setup`` (a swarm's) must still write its own."""
    import os

    path = tmp_path / "lines.log"
    wurk_log.setup(fmt="plain", logfile=str(path))
    wurk_log.info("parent")
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child
        try:
            wurk_log.info("child")
            wurk_log.flush()
        finally:
            os._exit(0)
    os.waitpid(child, 0)
    wurk_log.flush()
    lines = path.read_text().splitlines()
    assert f"pid={os.getpid()} " in next(line for line in lines if line.endswith("parent"))
    assert f"pid={child} " in next(line for line in lines if line.endswith("child"))
