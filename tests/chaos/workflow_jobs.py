"""The jobs of the workflow chaos run (``test_workflow_chaos.py``): every run recorded in a
ledger Redis the faults never touch (``jobs.LEDGER_ENV``), so the test counts runs and
what the fan-in received from outside the Redis under test."""

from __future__ import annotations

import json
import time

import wurk
from tests.chaos.jobs import ledger
from wurk.workflow import fan_out

__all__ = ["AFTER", "CHILDREN", "FINAL", "GATHERED", "after", "child", "doomed", "final",
           "gather", "split"]

CHILDREN = "ledger:wf-children"  # each child run's index
GATHERED = "ledger:wf-gathered"  # what each fan-in run received, JSON
FINAL = "ledger:wf-final"  # each final run's arguments, JSON
AFTER = "ledger:wf-after"  # each run of a step after one that dies: [its tag, its argument]


@wurk.job(name="ChaosWf::split")
def split(count: int) -> int:
    fan_out(child, [[n] for n in range(count)])
    return count


@wurk.job(name="ChaosWf::child")
def child(n: int) -> int:
    time.sleep(0.02)  # long enough for the faults to strike children mid-run
    ledger().rpush(CHILDREN, n)
    return n * n


@wurk.job(name="ChaosWf::gather")
def gather(values: list[int]) -> int:
    ledger().rpush(GATHERED, json.dumps(values))
    return sum(values)


@wurk.job(name="ChaosWf::final")
def final(total: int, count: int) -> str:
    ledger().rpush(FINAL, json.dumps([total, count]))
    return f"{count}:{total}"


@wurk.job(name="ChaosWf::doomed", retry=False)
def doomed() -> None:
    raise RuntimeError("this step dies: its workflow's policy says what follows")


@wurk.job(name="ChaosWf::after")
def after(tag: str, value: object) -> str:
    ledger().rpush(AFTER, json.dumps([tag, value]))
    return tag
