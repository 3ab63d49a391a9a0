"""The lowest release pyproject.toml admits for each name given, as pip pins.

    python scripts/floors.py 'redis[hiredis]' hiredis click   ->   redis[hiredis]==5.3 ...

Reads the first ``"name>=low`` of each name in pyproject.toml (a dependency, an extra's or
the dev list's) and prints ``name==low``, one a line. A name with no lower bound there is an
error: a floor the scripts would test must be written down first. Used by
``scripts/test-lowest`` and ``scripts/test-floors``; standard library only (it runs before
any virtualenv exists).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path


def floors(text: str, names: list[str]) -> list[str]:
    pins = []
    for name in names:
        found = re.search(r'"' + re.escape(name) + r'>=([0-9][0-9.]*)', text)
        if not found:
            raise SystemExit(f"pyproject.toml pins no lower bound for {name}")
        pins.append(f"{name}=={found.group(1)}")
    return pins


def main() -> None:
    text = (Path(__file__).resolve().parent.parent / "pyproject.toml").read_text(
        encoding="utf-8")
    print("\n".join(floors(text, sys.argv[1:])))


if __name__ == "__main__":
    main()
