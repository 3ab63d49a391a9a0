"""The Lua scripts' text: read on first use, whole, with its SHA1."""

from __future__ import annotations

import hashlib
import subprocess
import sys

import pytest

from wurk import scripts
from wurk.scripts import Script


def test_importing_every_feature_reads_no_script() -> None:
    """A worker imports every feature's module; their scripts are read only when they run."""
    code = ("import wurk, wurk.launcher, wurk.batch.accounting, wurk.limiter.kinds, "
            "wurk.unique, wurk.scripts as s; print(s.source.cache_info().currsize)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout.strip() == "0"


def test_a_script_is_its_preludes_then_itself_with_the_sha1_redis_gives_it() -> None:
    script = Script("batch_job.lua", prelude=("batch_lib.lua",))
    assert script.text == scripts.source("batch_lib.lua") + scripts.source("batch_job.lua")
    assert script.sha == hashlib.sha1(script.text.encode("utf-8")).hexdigest()
    assert script.evalsha(["k"], [1])[:3] == ("EVALSHA", script.sha, 1)


def test_a_missing_script_fails_when_used_not_when_declared() -> None:
    script = Script("no_such_script.lua")
    with pytest.raises(FileNotFoundError, match=r"no_such_script\.lua"):
        script.evalsha([], [])  # the command a call sends names the script's SHA1
