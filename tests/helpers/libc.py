"""Which C library the tests run on: the malloc arena limit is glibc's.

The same question ``wurk.runtime.malloc`` asks, asked again here on purpose: the tests' skip must
not hang on the code under test, or a wrong answer there would skip the tests that catch it.
"""

from __future__ import annotations

import os
import sys


def glibc() -> bool:
    try:
        return sys.platform.startswith("linux") and bool(os.confstr("CS_GNU_LIBC_VERSION"))
    except (ValueError, OSError):  # a libc without the name (musl)
        return False
