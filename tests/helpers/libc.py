"""Which C library the tests run on: the malloc arena limit is glibc's."""

from __future__ import annotations

import os
import sys


def glibc() -> bool:
    try:
        return sys.platform.startswith("linux") and bool(os.confstr("CS_GNU_LIBC_VERSION"))
    except (ValueError, OSError):  # a libc without the name (musl)
        return False
