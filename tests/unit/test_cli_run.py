"""``wurk.cli.run``: the exit code of every way a command can end, never a traceback."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

import click
import pytest

from wurk.cli import main, run
from wurk.errors import ConfigError, RedisUnavailable


@pytest.fixture
def command() -> Iterator[Callable[[Callable[[], None]], None]]:
    """Mount a throwaway ``wurk probe`` subcommand whose body the test chooses."""

    def mount(body: Callable[[], None]) -> None:
        main.add_command(click.command("probe")(body))

    yield mount
    main.commands.pop("probe", None)


def test_ctx_exit_code_is_returned(command: Callable[[Callable[[], None]], None]) -> None:
    def body() -> None:
        click.get_current_context().exit(3)

    command(body)
    assert run(["probe"]) == 3


def test_plain_return_is_0(command: Callable[[Callable[[], None]], None]) -> None:
    command(lambda: None)
    assert run(["probe"]) == 0


def test_wurk_error_is_one_line_and_exit_1(command: Callable[[Callable[[], None]], None],
                                           capsys: pytest.CaptureFixture[str]) -> None:
    def body() -> None:
        raise RedisUnavailable("redis://127.0.0.1:1/0: Connection refused")

    command(body)
    assert run(["probe"]) == 1
    assert capsys.readouterr().err == "Error: redis://127.0.0.1:1/0: Connection refused\n"


def test_config_error_exits_2(command: Callable[[Callable[[], None]], None],
                              capsys: pytest.CaptureFixture[str]) -> None:
    def body() -> None:
        raise ConfigError("concurrency must be a positive whole number, not 0")

    command(body)
    assert run(["probe"]) == 2
    assert capsys.readouterr().err.startswith("Error: concurrency must be")


def test_click_exception_keeps_its_code(command: Callable[[Callable[[], None]], None],
                                        capsys: pytest.CaptureFixture[str]) -> None:
    def body() -> None:
        raise click.ClickException("nope")

    command(body)
    assert run(["probe"]) == 1
    assert capsys.readouterr().err == "Error: nope\n"


def test_unknown_option_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["server", "status", "--no-such-flag"]) == 2
    # click 8.1 says "No such option: --no-such-flag", later ones "No such option '--…'"
    assert re.search("No such option:? '?--no-such-flag", capsys.readouterr().err)


def test_help_and_version_exit_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["--help"]) == 0
    assert run(["server", "--help"]) == 0
    assert run(["--version"]) == 0
    assert "wurk, version" in capsys.readouterr().out
