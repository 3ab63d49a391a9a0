"""The repository explains itself: names a newcomer can tell apart, no import circle among
wurk's modules, and no comment or page that sends a reader to a document they do not have."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "wurk"


@pytest.mark.parametrize("old", ["connection", "embed", "embedded", "processes"])
def test_no_module_keeps_a_name_that_could_mean_two_things(old: str) -> None:
    """``embed`` (a worker in your process) beside ``embedded`` (the server), ``processes``
    beside ``processor``, one ``connection`` module holding six things: gone."""
    assert not (PACKAGE / f"{old}.py").exists()
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(f"wurk.{old}")


def test_each_part_has_its_own_module() -> None:
    for name in ("connections/pool", "connections/replies", "connections/lease",
                 "connections/sockets", "connections/locate", "connections/server",
                 "inprocess", "runtime/pruning", "swarm/respawn"):
        assert (PACKAGE / f"{name}.py").exists(), name
    classes = {node.name for path in PACKAGE.rglob("*.py")
               for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
               if isinstance(node, ast.ClassDef)}
    assert "Backoff" in classes and "RespawnSchedule" in classes  # not two Backoffs


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """wurk modules ``path`` imports anywhere: at module level, inside a function or under
    ``if TYPE_CHECKING`` — a circle hidden in a function or a type is still a circle."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("wurk")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            if target.startswith("wurk"):
                if node.module:
                    found.add(target)
                found |= {f"{target}.{alias.name}" for alias in node.names}
    # A package is always imported before its modules: an edge to one's own package (its
    # ``__init__``) is no dependency.
    return {m for m in found if not name.startswith(m + ".")}


def test_wurk_modules_import_no_circle() -> None:
    """Importing any wurk module never needs a module that needs it back (the old
    ``config`` ↔ ``connection`` circle included)."""
    modules = {_module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph = {name: {m for m in _imports(path) if m in modules and m != name}
             for name, path in modules.items()}

    def circle_from(start: str) -> list[str] | None:
        stack = [(start, [start])]
        seen: set[str] = set()
        while stack:
            node, trail = stack.pop()
            for nxt in graph[node]:
                if nxt == start:
                    return [*trail, nxt]
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*trail, nxt]))
        return None

    # A package's __init__ importing its own submodules is not a circle of two parts.
    circles = [c for c in map(circle_from, sorted(graph)) if c is not None
               and not all(m == c[0] or m.startswith(c[0] + ".") for m in c)]
    assert circles == [], f"import circles: {circles[:3]}"


# A user of the repository has none of the planning documents these name.
_CITATION = re.compile(r"decisions\.md|features\.md|\bapi\.md|\bseeds?\b ?0\d\d|"
                       r"\bissue \d+\b|\(issue|spec/wire-format|"
                       # the planning spec's numbered sections; docs/wire-format.md has none
                       r"§|wire-format(?:\.md)?`*,? ?\d")


def _readable_files() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "CHANGELOG.md"]
    for folder in ("src", "docs", "benchmarks", "tests"):
        files += [p for p in (ROOT / folder).rglob("*")
                  if p.suffix in {".py", ".md", ".lua", ".html", ".rb", ".ru", ".yml", ".js"}
                  # virtualenvs, benchmarks/peers/.venv-arq among them
                  and not any(part.startswith(".venv") for part in p.parts)
                  and p.is_file()]
    return files


def test_no_comment_or_page_cites_a_document_users_do_not_have() -> None:
    this = Path(__file__).resolve()
    found = []
    for path in _readable_files():
        if path.resolve() == this:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if path.name == "CHANGELOG.md" and line.startswith("### "):
                continue  # entries are headed with the issue they close, by convention
            if _CITATION.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert found == [], "\n".join(found[:20])


def test_the_design_rules_are_in_the_repository() -> None:
    design = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    for rule in ("At least once", "Lua", "TIME", "middleware", "untrusted", "never replayed"):
        assert rule in design, rule
    assert "docs/design.md" in (ROOT / "README.md").read_text(encoding="utf-8")
