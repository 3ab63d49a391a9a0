"""The docs' code examples name only what exists: a cheap check of every block, no Redis.

``tests/system/test_docs_blocks.py`` runs the whole-program blocks against a server; the
blocks marked ``<!-- fragment -->`` it never runs. This keeps every block honest at least
this far:

1. every ```python block of README.md and docs/ compiles, as written (no top-level
   ``await``: an async example is an ``async def``);
2. every ``import wurk.x`` / ``from wurk.x import y`` in them names a public module and one
   of its public names (its ``__all__``, read from the source as test_public_surface does;
   ruff's F822 keeps every ``__all__`` name defined, so none is imported here);
3. every ``wurk.x.y`` in them is reachable after the block's own imports (``import wurk``
   does not load ``wurk.api``), through public names;
4. every ``wurk …`` command line of a ```sh / ```bash block names real subcommands and
   their real options (``src/wurk/cli``).
"""

from __future__ import annotations

import ast
import re
import shlex
from dataclasses import dataclass
from functools import cache

import click

from tests.unit.test_public_surface import PUBLIC, ROOT, exports
from wurk.cli import DEFAULT_COMMAND, main

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
# A fenced block, possibly indented (inside a list item): its language and its text.
_FENCE = re.compile(r"^( *)```(\w*)\n(.*?)^\1```$", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True)
class Block:
    where: str
    language: str
    code: str


def blocks(*languages: str) -> list[Block]:
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for match in _FENCE.finditer(text):
            indent, language, body = match.groups()
            if language in languages:
                line = text.count("\n", 0, match.start()) + 1
                code = "".join(row[len(indent):] if row.startswith(indent) else row
                               for row in body.splitlines(keepends=True))
                found.append(Block(f"{page.relative_to(ROOT)}:{line}", language, code))
    return found


PYTHON = blocks("python")


def _tree(block: Block) -> ast.Module:
    return ast.parse(block.code, block.where)


def test_every_python_block_compiles() -> None:
    assert len(PYTHON) > 50  # the pages were found
    broken = []
    for block in PYTHON:
        try:
            compile(block.code, block.where, "exec", dont_inherit=True)
        except SyntaxError as exc:
            broken.append(f"{block.where}+{exc.lineno}: {exc.msg}")
    assert broken == []


@cache
def _exports(module: str) -> list[str]:
    return exports(module)


def _public(module: str, name: str) -> bool:
    return name in _exports(module) or f"{module}.{name}" in PUBLIC


def test_every_wurk_import_names_a_public_name() -> None:
    wrong = []
    for block in PYTHON:
        for node in ast.walk(_tree(block)):
            if isinstance(node, ast.Import):
                wrong += [f"{block.where}: import {alias.name}" for alias in node.names
                          if alias.name.split(".")[0] == "wurk" and alias.name not in PUBLIC]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "wurk":
                module = node.module or ""
                if module not in PUBLIC:
                    wrong.append(f"{block.where}: from {module} (not a public module)")
                    continue
                wrong += [f"{block.where}: from {module} import {alias.name}"
                          for alias in node.names
                          if not _public(module, alias.name)]
    assert wrong == []


def _dotted(node: ast.expr) -> list[str] | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return [node.id, *reversed(parts)] if isinstance(node, ast.Name) else None


def _reachable(chain: list[str], imported: set[str]) -> bool:
    """``wurk.a.b.c``: each step a public name of the module before it, or a module the
    block imported itself; past the last module, the rest is the object's (not checked)."""
    module = chain[0]
    for name in chain[1:]:
        sub = f"{module}.{name}"
        if sub in imported or (sub in PUBLIC and name in _exports(module)):
            module = sub
            continue
        return name in _exports(module)
    return True


def test_every_wurk_attribute_is_reachable_from_the_blocks_imports() -> None:
    wrong = []
    for block in PYTHON:
        tree = _tree(block)
        imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                    for alias in node.names}
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute):
                continue
            chain = _dotted(node)  # ``wurk.a.b`` and, walked further, ``wurk.a``: both held
            if chain and chain[0] == "wurk" and not _reachable(chain, imported):
                wrong.append(f"{block.where}+{node.lineno}: {'.'.join(chain)}")
    assert wrong == []


def _options(command: click.Command, ctx: click.Context) -> dict[str, click.Option]:
    return {flag: param for param in command.get_params(ctx) if isinstance(param, click.Option)
            for flag in (*param.opts, *param.secondary_opts)}


def problems(words: list[str]) -> list[str]:
    """What is wrong with ``wurk <words>``: an unknown subcommand or option. Arguments and
    option values are not checked (the docs write placeholders: JID, DIR…)."""
    if words and words[0].startswith("-") and words[0] not in ("-h", "--help", "--version"):
        words = [DEFAULT_COMMAND, *words]  # as WurkGroup.parse_args does
    command: click.Command = main
    ctx = click.Context(main, info_name="wurk")
    found, takes_value = [], False
    for word in words:
        if takes_value:
            takes_value = False
        elif word == "--":
            break
        elif word.startswith("-"):
            flag, has_value, _ = word.partition("=")
            option = _options(command, ctx).get(flag)
            if option is None:
                found.append(f"{ctx.command_path}: no option {flag}")
            else:
                takes_value = not (option.is_flag or option.count or has_value)
        elif isinstance(command, click.Group):
            sub = command.get_command(ctx, word)
            if sub is None:
                found.append(f"{ctx.command_path}: no command {word!r}")
                break
            command, ctx = sub, click.Context(sub, parent=ctx, info_name=word)
    return found


def test_every_wurk_command_in_a_shell_block_is_real() -> None:
    checked, wrong = 0, []
    for block in blocks("sh", "bash"):
        for line in block.code.splitlines():
            words = shlex.split(line, comments=True)
            while words and (words[0] == "$" or re.fullmatch(r"[A-Z_]+=.*", words[0])):
                words = words[1:]  # a prompt, the environment a line sets
            if words[:1] == ["wurk"]:
                checked += 1
                wrong += [f"{block.where}: {line.strip()} -> {p}" for p in problems(words[1:])]
    assert checked > 10  # the blocks were found
    assert wrong == []


def test_the_command_check_catches_what_it_should() -> None:
    assert problems(["-r", "app.jobs", "-c", "10"]) == []
    assert problems(["batches", "show", "--json", "BID"]) == []
    assert problems(["-r", "app.jobs", "--concurency", "10"]) == ["wurk worker: no option "
                                                                   "--concurency"]
    assert problems(["stat"]) == ["wurk: no command 'stat'"]
    assert problems(["server", "begin"]) == ["wurk server: no command 'begin'"]
