"""A three-step pipeline built from batch callbacks: fan out, fan in, then a final step.

    python examples/batch_pipeline.py [PAGES]

Step 1 fans out: one job per page, in a batch of their own. When they have all succeeded,
that batch's success callback fans in: it reopens the overall batch and adds step 2, one
job that combines what step 1 wrote. The overall batch succeeds only once both steps (and
their callbacks) have, and its success callback is the final step.

It runs its own worker in this process (``wurk.embed``), so it needs nothing but a Redis:
``REDIS_URL``, or the embedded server wurk starts.
"""

from __future__ import annotations

import sys
import time
import uuid
from typing import Any

import wurk


@wurk.job(name="Pipeline::fetch_page")
def fetch_page(run: str, page: int) -> None:
    """Step 1, once per page: pretend to fetch it, store what it found."""
    with wurk.redis() as conn:
        conn.call("HSET", f"pipeline:{run}:pages", page, page * page)


@wurk.job(name="Pipeline::combine")
def combine(run: str) -> None:
    """Step 2: read every page's result, write the total."""
    with wurk.redis() as conn:
        found = conn.call("HVALS", f"pipeline:{run}:pages")
        conn.call("SET", f"pipeline:{run}:total", sum(int(value) for value in found))


@wurk.job(name="Pipeline::start")
def start(run: str, pages: int) -> None:
    """The overall batch's first job: it starts step 1 as a child batch."""
    overall = wurk.current_batch()
    assert overall is not None
    with overall.jobs():
        step1 = wurk.Batch(description=f"{run}: fetch {pages} pages")
        step1.on("success", "Pipeline#fetched", {"run": run})
        with step1.jobs():
            fetch_page.perform_bulk([[run, page] for page in range(pages)])


class Pipeline(wurk.Job, name="Pipeline"):
    """The callbacks that join the steps."""

    # A stored "Pipeline#<method>" target may name only these (and on_* methods).
    batch_callbacks = ("fetched",)

    def fetched(self, status: wurk.BatchStatus, options: dict[str, Any]) -> None:
        """Step 1 succeeded: reopen the overall batch and add step 2 to it."""
        with wurk.Batch(status.parent_bid).jobs():
            step2 = wurk.Batch(description=f"{options['run']}: combine")
            with step2.jobs():
                combine.perform_async(options["run"])

    def on_success(self, status: wurk.BatchStatus, options: dict[str, Any]) -> None:
        """The final step: every page fetched, the total combined."""
        run = options["run"]
        with wurk.redis() as conn:
            total = int(conn.call("GET", f"pipeline:{run}:total"))
            conn.call("SET", f"pipeline:{run}:report", f"{options['pages']} pages, total {total}")


def main(pages: int) -> int:
    run = uuid.uuid4().hex[:8]
    worker = wurk.embed()
    try:
        overall = wurk.Batch(description=f"pipeline {run}")
        overall.on("success", Pipeline, {"run": run, "pages": pages})
        with overall.jobs():
            start.perform_async(run, pages)
        overall.status.join(timeout=60, until="success")
        report = None
        for _ in range(600):  # the final step is a job of its own: give it a moment
            with wurk.redis() as conn:
                report = conn.call("GET", f"pipeline:{run}:report")
            if report is not None:
                break
            time.sleep(0.1)
    finally:
        worker.stop()
    print(f"pipeline {run}: {report.decode() if report else 'no report'}")
    return 0 if report else 1


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 10))
