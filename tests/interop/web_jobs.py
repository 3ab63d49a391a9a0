"""Jobs of every wurk feature, run by the in-process worker of the Sidekiq dashboard test
(``test_sidekiq_web_pages.py``) so that Redis holds what each feature writes."""

from __future__ import annotations

import asyncio
from typing import Any

import wurk
from tests.helpers.job_redis import r

STARTED = "web:slow-started"
WINDOW = wurk.limiter.window("web-window", 1, 3600, wait_timeout=0)


@wurk.job(name="RubyWeb::Record")
def record(*args: Any) -> None:
    pass


def _an_hour(count: int, exc: BaseException) -> float:
    return 3600.0


@wurk.job(name="RubyWeb::Fail", retry=3, retry_in=_an_hour)
def fail(*args: Any) -> None:
    raise ValueError(f"web failure {args[:1]}")


@wurk.job(name="RubyWeb::Die", retry=0)
def die(*args: Any) -> None:
    raise RuntimeError("web death")


@wurk.job(name="RubyWeb::SlowAsync")
async def slow_async(seconds: float) -> None:
    r().rpush(STARTED, "1")
    await asyncio.sleep(seconds)


@wurk.job(name="RubyWeb::Result", result_ttl=600)
def result(a: int, b: int) -> int:
    return a + b


@wurk.job(name="RubyWeb::Secret", encrypt=True, retry=3, retry_in=_an_hour)
def secret(order: int, card: dict[str, str]) -> None:
    raise ValueError("card declined")


@wurk.job(name="RubyWeb::Profiled")
def profiled(n: int) -> int:
    return sum(range(n))


@wurk.job(name="RubyWeb::Limited", retry=3)
def limited(n: int) -> None:
    with WINDOW.within_limit():
        pass


class Export(wurk.IterableJob, name="RubyWeb::Export", retry=3):
    def retry_in(self, count: int, exc: BaseException) -> float:
        return 3600.0

    def build_enumerator(self, account: int, *, cursor: int | None) -> Any:
        return wurk.iteration.ids(0, 10, cursor=cursor)

    def each_iteration(self, item: int, account: int) -> None:
        if item == 4:
            raise ValueError("export stopped at 4")


@wurk.job(name="RubyWeb::Step")
def step(n: int) -> int:
    return n + 1



@wurk.job(name="RubyWeb::Flaky", retry=5, retry_in=_an_hour, backtrace=True)
def flaky(n: int) -> None:
    raise KeyError(f"flaky ünïcode\nsecond line {n}")
