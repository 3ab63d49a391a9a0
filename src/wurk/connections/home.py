"""The embedded server's home: which directory it is, and the files the server keeps there.

Both the code that finds Redis (``wurk.connections.locate``) and the server's own
(``wurk.connections.server``) need these; they live apart from both so that looking at a
home (is a server's port written there?) loads none of the server's code.

``find_home``: a bare name (the default ``.wurk``) is looked for the way git looks for
``.git``: in the current directory, then each parent, up to the project root (the nearest
directory holding one of ``PROJECT_MARKERS``); the first directory holding it wins. With
none on the way, the new home goes in the project root, or in the current directory outside
any project. So a script run from a subfolder finds the server the worker started at the
top. A path (absolute, or with a ``/``) is used as given.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["LOCK_FILE", "LOG_FILE", "PID_FILE", "PORT_FILE", "PROJECT_MARKERS", "find_home"]

# What makes a directory a project's root: the walk for ``.wurk`` stops there, so a
# stray ``~/.wurk`` is never picked up by a project below it that has none yet.
PROJECT_MARKERS = (".git", ".hg", "pyproject.toml", "setup.py", "setup.cfg")

# The embedded server's files in its home.
LOCK_FILE, PID_FILE, PORT_FILE, LOG_FILE = "server.lock", "server.pid", "server.port", "server.log"


def find_home(home: str | os.PathLike[str], start: str | os.PathLike[str] | None = None
              ) -> Path:
    """The absolute directory of the embedded server for the setting ``home``."""
    text = os.fspath(home)
    here = Path(os.path.abspath(start if start is not None else os.getcwd()))
    if os.path.isabs(text) or "/" in text or text in ("", ".", ".."):
        return Path(os.path.abspath(here / text))
    for directory in (here, *here.parents):
        if (directory / text).is_dir():
            return directory / text
        if any((directory / marker).exists() for marker in PROJECT_MARKERS):
            return directory / text
    return here / text
