"""The public surface is pinned: the modules a user may import, and each one's ``__all__``.

A change to it shows up here as a diff against ``public_surface.txt``: deliberate, reviewed,
never by accident. Every other module is internal (its names may change in any release);
``wurk/__init__.py`` says so, and the docs and examples import only public modules.

To accept a deliberate change, regenerate the file and review its diff:
``.venv/bin/python -m tests.unit.test_public_surface > tests/unit/public_surface.txt``.
"""

from __future__ import annotations

import ast
import importlib
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "wurk"
PINNED = Path(__file__).with_name("public_surface.txt")

# What the README, docs/ and examples/ tell users to import.
PUBLIC = (
    "wurk", "wurk.api", "wurk.api.values", "wurk.batch", "wurk.connections.server",
    "wurk.context", "wurk.contrib.django", "wurk.crypto", "wurk.contrib.django.settings",
    "wurk.contrib.django.models", "wurk.contrib.django.tasks", "wurk.contrib.django.urls",
    "wurk.contrib.fastapi",
    "wurk.contrib.flask", "wurk.contrib.sqlalchemy", "wurk.deploy", "wurk.errors",
    "wurk.expiry", "wurk.inprocess", "wurk.iteration", "wurk.limiter", "wurk.metrics",
    "wurk.middleware",
    "wurk.otel", "wurk.reliability", "wurk.results", "wurk.scheduled", "wurk.swarm",
    "wurk.testing", "wurk.unique",
    "wurk.web", "wurk.workflow",
)


def _path(module: str) -> Path:
    base = ROOT / "src" / Path(*module.split("."))
    return base / "__init__.py" if base.is_dir() else base.with_suffix(".py")


def exports(module: str) -> list[str]:
    """A module's ``__all__``, read from its source (the Django modules cannot be imported
    without a Django project)."""
    tree = ast.parse(_path(module).read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
                assert node.value is not None
                return sorted(ast.literal_eval(node.value))
    return []


def surface() -> str:
    return "".join(f"{name}: {', '.join(exports(name))}\n" for name in PUBLIC)


def test_the_public_surface_is_the_pinned_one() -> None:
    assert surface() == PINNED.read_text(encoding="utf-8"), (
        "the public surface changed: if that is deliberate, regenerate "
        "tests/unit/public_surface.txt (see this file's docstring) and review the diff")


def test_every_module_says_what_it_exports() -> None:
    """``__all__`` in every module: a newcomer (and ``from x import *``) sees the surface."""
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT / "src").with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = [t.id for node in tree.body if isinstance(node, (ast.Assign, ast.AnnAssign))
                 for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
                 if isinstance(t, ast.Name)]
        if "__all__" not in names:
            missing.append(module)
    assert missing == []


_IMPORT = re.compile(r"^\s*(?:from|import)\s+(wurk(?:\.[a-z_]+)*)", re.MULTILINE)


def test_the_docs_and_examples_import_only_public_modules() -> None:
    files = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md"),
             *(p for p in (ROOT / "examples").rglob("*.py"))]
    found = []
    for path in files:
        for module in _IMPORT.findall(path.read_text(encoding="utf-8")):
            if module not in PUBLIC:
                found.append(f"{path.relative_to(ROOT)}: {module}")
    assert found == [], "internal modules in user-facing code: " + "; ".join(found)


def test_the_package_says_which_modules_are_public() -> None:
    doc = importlib.import_module("wurk").__doc__ or ""
    for name in PUBLIC[1:]:
        assert f"``{name}``" in doc, name


if __name__ == "__main__":
    sys.stdout.write(surface())
