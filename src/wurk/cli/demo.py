"""``wurk demo``: the README's first command — push example jobs and show where they went.

1. Finds Redis as every wurk process does (``wurk.connections.locate``); with no ``REDIS_URL`` that
   is the embedded server of the nearest ``.wurk``, started now or reused.
2. Pushes a handful of the jobs in ``wurk.cli.examples`` and prints the server, each job's
   queue and jid, and the size of each queue.
3. ``work_off`` is the seam where a worker runs them and the demo reports how many ran.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import click

from ..config import Config
from ..connections.home import find_home
from ..connections.locate import describe_url
from ..connections.server import EmbeddedServer
from ..job import JobFunction
from ..payload import DEFAULT_QUEUE, QUEUE

__all__ = ["demo", "work_off"]

# Five small jobs run in milliseconds; a worker that needs longer is reported, not awaited.
WORK_TIMEOUT = 30.0
# How often the demo looks whether its worker has emptied the queues.
DEMO_POLL = 0.05


def examples_to_push() -> list[tuple[JobFunction[..., Any], tuple[Any, ...]]]:
    """The demo's jobs; ``wurk.cli.examples`` is imported here, so that only ``wurk demo``
    (not every ``wurk`` command) registers its jobs."""
    from . import examples

    return [
        (examples.add, (2, 3)),
        (examples.add, (40, 2)),
        (examples.greet, ("world",)),
        (examples.count_words, ("the quick brown fox",)),
        (examples.count_words, ("jumps over the lazy dog",)),
    ]


@dataclass(frozen=True)
class Pushed:
    call: str
    queue: str
    jid: str


@click.command("demo")
@click.option("--push-only", is_flag=True, help="Push the jobs and leave them queued.")
def demo(push_only: bool) -> None:
    """Push a few example jobs to the Redis wurk finds (by default the embedded server),
    then run a worker in this process until they ran."""
    config = Config()
    try:
        click.echo(_where(config))
        pushed = push_examples(config)
        click.echo(f"Pushed {len(pushed)} example jobs (defined in wurk.cli.examples):")
        width = max(len(job.call) for job in pushed)
        for job in pushed:
            click.echo(f"  {job.call:<{width}}  queue {job.queue:<8} jid {job.jid}")
        click.echo("They wait in Redis lists:")
        for queue, size in queue_sizes(config, [job.queue for job in pushed]).items():
            click.echo(f"  {config.keys.queue(queue):<15} {size} jobs")
        ran = None if push_only else work_off(config, [job.jid for job in pushed])
        click.echo(_outcome(ran, len(pushed)))
    finally:
        config.close()


def _where(config: Config) -> str:
    if config.redis_url:
        return f"Redis: {describe_url(config.redis_url)} (from REDIS_URL or the configuration)"
    home = find_home(config.home)
    status = EmbeddedServer(home).start()
    place = f"Redis: embedded at {home}, port {status.port}"
    if status.started:
        return (f"{place} — started it now (pid {status.pid}); it keeps running for your app, "
                "worker and dashboard, `wurk server stop` stops it")
    return f"{place} — already running (pid {status.pid})"


def push_examples(config: Config) -> list[Pushed]:
    """Push every example once; what was pushed, in order."""
    pushed = []
    for function, args in examples_to_push():
        jid = function.set(config=config).perform_async(*args)
        queue = str(function.definition.options.get(QUEUE, DEFAULT_QUEUE))
        call = f"{function.name}({', '.join(map(repr, args))})"
        pushed.append(Pushed(call, queue, str(jid)))
    return pushed


def queue_sizes(config: Config, queues: Sequence[str]) -> dict[str, int]:
    names = list(dict.fromkeys(queues))

    def read(client: Any) -> dict[str, int]:
        pipe = client.pipeline(transaction=False)
        for name in names:
            pipe.llen(config.keys.queue(name))
        return dict(zip(names, pipe.execute(), strict=True))

    return config.pool().run(read, idempotent=True)


def work_off(config: Config, jids: Sequence[str], *,
             timeout: float = WORK_TIMEOUT) -> int | None:
    """Run a worker in this process until it ran as many jobs as were pushed and nothing
    waits or runs (or ``timeout`` passed), stop it, and return how many jobs it ran.

    Empty queues and an empty busy map alone do not say the jobs ran: a processor holds the
    jobs it fetched ahead in its own list, and between two of them nothing is busy; stopped
    then, it would give them back unrun."""
    from .. import log as wurk_log
    from ..launcher import Launcher

    queues = ["default", "low"]
    worker_config = Config(redis_url=config.pool().url, key_prefix=config.key_prefix,
                           queues=queues, concurrency=2, timeout=5, heartbeat_interval=1,
                           fetch_timeout=0.2,  # an idle processor stops within this
                           scheduler_initial_wait=0, poll_interval_average=1,
                           log_format="plain")
    wurk_log.setup(fmt="plain")
    launcher = Launcher(worker_config, embedded=True)
    click.echo(f"Starting a worker on {', '.join(queues)} to run them:")
    launcher.start()
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and (
            launcher.total_processed < len(jids)
            or any(queue_sizes(config, queues).values()) or len(launcher.busy)
        ):
            time.sleep(DEMO_POLL)
    finally:
        launcher.stop()
        processed = launcher.total_processed
        worker_config.close()
    return min(processed, len(jids))


def _outcome(ran: int | None, pushed: int) -> str:
    if ran is None:
        return "No worker ran them: they stay queued, and `wurk server status` counts them."
    return (f"A worker ran {ran} of the {pushed} jobs. Next: define your own with @wurk.job "
            "and run `wurk -r your.module`.")
