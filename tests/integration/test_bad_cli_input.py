"""The CLI and the config loader, fuzzed: whatever the flags or the file hold, the answer is
a configuration or one clear line and exit code 2 — never a traceback.

The worker is always given a job module that does not exist, so a command line that is
otherwise fine stops (with exit 2, naming ``-r``) before a worker would start.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wurk.cli import run
from wurk.config import Config
from wurk.configfile import load_file
from wurk.errors import ConfigError

BOUNDED = settings(max_examples=50, deadline=None,
                   suppress_health_check=[HealthCheck.function_scoped_fixture])
NO_MODULE = "tests.there_is_no_such_module_here"
CODE_SETTINGS = {"client_middleware", "server_middleware", "error_handlers", "death_handlers",
                 "lifecycle", "limiter_errors", "limiter_backoff"}
SETTINGS = sorted(f.name for f in fields(Config) if f.init and f.name not in CODE_SETTINGS)

yaml_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
    | st.text(max_size=12),
    lambda children: st.lists(children, max_size=3)
    | st.dictionaries(st.text(max_size=6), children, max_size=3),
    max_leaves=8,
)
setting_names = st.sampled_from([*SETTINGS, "capsules", "swarm", "production", "no_such"])


@pytest.fixture(autouse=True)
def _logging_restored() -> Iterator[None]:
    """The CLI sets up the wurk logger (handler, level, no propagation): undo it."""
    logger = logging.getLogger("wurk")
    saved = (list(logger.handlers), logger.level, logger.propagate)
    yield
    logger.handlers[:] = saved[0]
    logger.setLevel(saved[1])
    logger.propagate = saved[2]


def worker_exit(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    logger = logging.getLogger("wurk")
    saved = (list(logger.handlers), logger.level, logger.propagate)
    try:
        code = run(["worker", "-r", NO_MODULE, *argv])
    finally:
        logger.handlers[:] = saved[0]
        logger.setLevel(saved[1])
        logger.propagate = saved[2]
    return code, capsys.readouterr().err


def assert_one_clear_line(code: int, err: str) -> None:
    assert code == 2, err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    # click prints "Usage: …" and "Try … for help." around its one-line error.
    errors = [line for line in lines if line.startswith("Error:")]
    assert len(errors) == 1, err


# -- the config file ----------------------------------------------------------------------
@BOUNDED
@given(data=st.dictionaries(setting_names, yaml_values, max_size=4))
def test_config_files_with_any_settings(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        data: dict[str, Any]) -> None:
    path = tmp_path / "wurk.yml"
    path.write_text(yaml.safe_dump(data))
    try:
        Config.from_mapping(load_file(path))
    except ConfigError as exc:
        assert "\n" not in str(exc).strip() and str(exc)
    code, err = worker_exit(capsys, "-C", str(path))
    assert_one_clear_line(code, err)


@BOUNDED
@given(text=st.text(max_size=200) | st.binary(max_size=200).map(repr))
def test_config_files_of_any_text(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                  text: str) -> None:
    path = tmp_path / "wurk.yml"
    path.write_text(text)
    assert_one_clear_line(*worker_exit(capsys, "-C", str(path)))


@BOUNDED
@given(raw=st.binary(max_size=200))
def test_config_files_of_any_bytes(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                   raw: bytes) -> None:
    path = tmp_path / "wurk.yml"
    path.write_bytes(raw)
    assert_one_clear_line(*worker_exit(capsys, "-C", str(path)))


@pytest.mark.parametrize("text", ["[" * 20_000, "a: " + "[" * 20_000,
                                  "&a [*a]", "a: !!python/object:os.system x"])
def test_config_files_that_defeat_a_parser(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str],
                                           text: str) -> None:
    path = tmp_path / "wurk.yml"
    path.write_text(text)
    assert_one_clear_line(*worker_exit(capsys, "-C", str(path)))


def test_a_fetch_longer_than_the_socket_timeout_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "wurk.yml"
    path.write_text("fetch_timeout: 5\nsocket_timeout: 2\n")
    code, err = worker_exit(capsys, "-C", str(path))
    assert_one_clear_line(code, err)
    assert "fetch_timeout (5 s) must be shorter than socket_timeout (2 s)" in err


def test_a_config_file_that_is_not_utf8_says_so(tmp_path: Path) -> None:
    path = tmp_path / "wurk.yml"
    path.write_bytes(b"concurrency: \xff\xfe\n")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_file(path)


# -- flags ----------------------------------------------------------------------------------
flag_values = st.text(min_size=1, max_size=20).filter(lambda s: not s.startswith("-"))


@BOUNDED
@given(flag=st.sampled_from(["-c", "-t", "-q", "-e", "-g", "--fetch", "--log-format", "-C"]),
       value=flag_values)
def test_worker_flags_with_any_value(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                     flag: str, value: str) -> None:
    if flag == "-C":
        value = str(tmp_path / value.replace("/", "_").replace("\x00", "_"))
    assert_one_clear_line(*worker_exit(capsys, flag, value))


@BOUNDED
@given(argv=st.lists(st.text(max_size=12), max_size=5))
def test_any_words_after_wurk(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    """Any words at all: a known exit code, no traceback; a worker never starts (the words
    that would start one are followed by a module that does not exist)."""
    starts_something = bool(argv) and argv[0] in ("worker", "demo", "server")
    if starts_something or any(a.startswith("-") for a in argv):
        argv = [*argv, "-r", NO_MODULE] if argv and argv[0] == "worker" else ["stats", *argv]
    code = run(argv)
    err = capsys.readouterr().err
    assert code in (0, 1, 2, 3), (argv, code, err)
    assert "Traceback" not in err


@pytest.mark.parametrize("flag", [("-t", "nan"), ("-t", "inf")])
def test_a_timeout_that_is_no_number_is_one_clear_line(capsys: pytest.CaptureFixture[str],
                                                       flag: tuple[str, str]) -> None:
    code, err = worker_exit(capsys, *flag)
    assert_one_clear_line(code, err)
    assert "timeout must be a number of seconds" in err


def test_an_interval_no_thread_can_wait_is_one_clear_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """It started a worker whose heartbeat thread died of an OverflowError."""
    path = tmp_path / "wurk.yml"
    path.write_text("heartbeat_interval: 10000000000\n")
    code, err = worker_exit(capsys, "-C", str(path))
    assert_one_clear_line(code, err)
    assert "heartbeat_interval must be a number of seconds up to 9,223,372,036" in err
    code, err = worker_exit(capsys, "-t", "1e10")
    assert_one_clear_line(code, err)
    assert "timeout must be a number of seconds up to" in err


@pytest.mark.parametrize("spec", ["a,1001", "a,1000000000", "a,-1"])
def test_a_queue_weight_out_of_bounds_is_one_clear_line(
        capsys: pytest.CaptureFixture[str], spec: str) -> None:
    """``-q a,1000000000`` was taken: a weighted fetch lists each name weight times, so the
    worker spent gigabytes at boot and a long shuffle at every fetch."""
    code, err = worker_exit(capsys, "-q", spec)
    assert_one_clear_line(code, err)
    assert f"queue {spec!r}: the weight must be from 0 to 1,000" in err
    assert Config(queues=["a,1000"]).all_capsules()[0].queues == [("a", 1000)]


def test_a_logfile_that_cannot_be_opened_is_one_clear_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--logfile`` in a folder that does not exist (or cannot be written) ended the
    worker with Python's traceback of the FileNotFoundError from logging's file handler."""
    path = tmp_path / "no-such-folder" / "wurk.log"
    code, err = worker_exit(capsys, "--logfile", str(path))
    assert_one_clear_line(code, err)
    assert "'--logfile'" in err and str(path) in err and "No such file or directory" in err


@pytest.mark.parametrize("name", ["default", ":default"])
def test_a_file_capsule_named_default_is_one_clear_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str) -> None:
    """``capsules: {default: …}`` started a worker with two capsules named 'default': the
    top level's and the file's, sharing one pool sized for the first and one entry of the
    process record, so the worker served other queues with other threads than asked."""
    path = tmp_path / "wurk.yml"
    path.write_text(f"capsules:\n  {name}:\n    concurrency: 20\n    queues: [q]\n")
    code, err = worker_exit(capsys, "-C", str(path))
    assert_one_clear_line(code, err)
    assert "capsule 'default'" in err and "top-level concurrency and queues" in err
