"""The repository explains itself: names a newcomer can tell apart, no import circle among
wurk's modules, and no comment or page that sends a reader to a document they do not have."""

from __future__ import annotations

import ast
import functools
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


def test_no_package_defines_a_name_one_of_its_modules_has() -> None:
    """``wurk.control`` defined a function ``cancel`` beside its module ``cancel.py``,
    imported inside the function: once it ran, the package's attribute was the module, and
    ``from wurk.control import cancel`` in a later import got something not callable."""
    clashes = []
    for init in PACKAGE.rglob("__init__.py"):
        tree = ast.parse(init.read_text(encoding="utf-8"))
        defined = {node.name for node in tree.body
                   if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
        modules = {p.stem for p in init.parent.glob("*.py")} | {
            p.parent.name for p in init.parent.glob("*/__init__.py")}
        clashes += [f"{_module_name(init)}.{name}" for name in sorted(defined & modules)]
    assert clashes == []


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for path in PACKAGE.rglob("*.py")}


def _imports(path: Path) -> set[str]:
    """The wurk modules ``path`` needs: every import — at module level, inside a function or
    under ``if TYPE_CHECKING`` (a circle hidden in a function or a type is still a circle).
    ``from X import n`` needs the module ``X.n`` when there is one, else ``X`` itself (a name
    its ``__init__`` defines)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.add(sub if sub in MODULES else target)
        elif _imports_wurk_by_name(node):  # importlib.import_module("wurk.x"): still an import
            assert isinstance(node, ast.Call)
            text = node.args[0]
            if isinstance(text, ast.Constant):  # an f-string names no one module: not drawn
                found.add(f"{package}{text.value}" if text.value.startswith(".")
                          else text.value)
    return {m for m in found if m in MODULES and m != name}


@functools.cache
def graph() -> dict[str, set[str]]:
    """Every wurk module's imports, parsed once, by the first test that asks (not at
    collection, which every process of the suite does)."""
    return {name: _imports(path) for name, path in MODULES.items()}


def _reach(start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for nxt in graph()[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_wurk_modules_import_no_circle() -> None:
    """Importing any wurk module never needs a module that needs it back, counting imports
    inside functions and under ``TYPE_CHECKING``."""
    circles = sorted(name for name in graph() if name in _reach(name))
    assert circles == [], f"modules on an import circle: {circles}"


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_no_package_leaves_itself_and_comes_back() -> None:
    """The hidden circle: importing ``wurk.pkg.mod`` first runs ``wurk.pkg``'s ``__init__``.
    If what that ``__init__`` imports leads out of the package and back into it (``batch``
    → ``job`` → ``client`` → ``batch.accounting``), the module that comes back finds its
    package half made. So no package's imports may leave it and lead back in."""
    found = []
    for package, path in MODULES.items():
        if path.name != "__init__.py" or package == "wurk":
            continue
        for outside in sorted(m for m in _reach(package) if not _inside(m, package)):
            back = sorted(m for m in _reach(outside) if _inside(m, package))
            if back:
                found.append(f"{package} -> {outside} -> {back[0]}")
    assert found == [], "\n".join(found)


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


# Where a wurk module may be imported inside a function, and why; anywhere else a feature
# attaches through middleware, a duty, a push writer or a Lua script, never a lazy import.
LAZY_IMPORTS_ALLOWED = {
    "wurk.cli": "each command loads only what it runs: `wurk stats` never loads the worker",
    "wurk.contrib": "framework glue runs when the framework calls it (Django's ready())",
    "wurk.inprocess": "`import wurk` in a web app must not load the whole worker",
    "wurk.batch.sets": "retrying a batch reads the dead set through wurk.api, which a worker "
                       "(it loads wurk.batch) never loads",
    "wurk.control": "wurk.cancel reads queues and sets through wurk.api, which neither "
                    "`import wurk` nor a worker loads",
    "wurk.workflow": "cancelling a workflow stops its running steps with wurk.cancel, which "
                     "reads wurk.api, which a worker (it loads wurk.workflow) never loads",
    "wurk.metrics.instruments": "a listener's HTTP server costs ~1 MB; most workers run none",
    "wurk.api": "each name is imported on first use (PEP 562): a worker reads checked values "
                "through wurk.api.values and does not carry the rest of the model",
    "wurk.connections.locate": "the embedded server's code is loaded when it is the answer: "
                               "a worker on a configured Redis keeps none of it",
}


def _imports_wurk_by_name(node: ast.AST) -> bool:
    """``importlib.import_module("wurk.…")`` or of a relative name (``".x"``, an f-string
    starting so): an import a scan of import statements does not see."""
    if not (isinstance(node, ast.Call) and node.args
            and isinstance(node.func, ast.Attribute | ast.Name)
            and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id)
            in ("import_module", "__import__")):
        return False
    name = node.args[0]
    if isinstance(name, ast.JoinedStr) and name.values:
        name = name.values[0]
    return (isinstance(name, ast.Constant) and isinstance(name.value, str)
            and name.value.startswith(("wurk", ".")))


def test_no_wurk_module_is_imported_inside_a_function_but_where_listed() -> None:
    found = []
    for name, path in MODULES.items():
        if any(name == allowed or name.startswith(allowed + ".")
               for allowed in LAZY_IMPORTS_ALLOWED):
            continue
        for function in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(function):
                imports = isinstance(node, ast.ImportFrom) and bool(
                    node.level or (node.module or "").startswith("wurk"))
                if imports or _imports_wurk_by_name(node):
                    found.append(f"{name}:{getattr(node, 'lineno', '?')}")
    assert found == []


def test_the_internals_walk_names_only_files_that_exist() -> None:
    """docs/internals.md walks a job through the code: every path it names is real, and it
    names the pipeline's files."""
    text = (ROOT / "docs" / "internals.md").read_text(encoding="utf-8")
    named = set(re.findall(r"src/wurk/[\w/.]*", text))
    missing = sorted(path for path in named if not (ROOT / path.rstrip(".")).exists())
    assert missing == []
    for stage in ("job", "client/core", "client/writers", "middleware", "launcher", "manager",
                  "processor", "fetch/reliable", "retry", "morgue", "scheduled", "heartbeat",
                  "fetch/reaper"):
        assert f"src/wurk/{stage}.py" in named, stage
