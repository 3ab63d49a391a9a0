"""The chaos suite's other faults on a Redis Cluster (``tests.chaos.cluster_run``): worker
processes SIGKILLed, every client connection of every primary cut, a primary stopped and
started again; 6,000 jobs over six queues on three primaries, with retries and scheduled
jobs on the way. Every job runs, none is lost, repeats stay within what the faults had in
flight, no processor thread dies and nothing is left in any keyspace."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.cluster_run import CUT, RESTART, WORKER, ClusterPlan, cluster_chaos
from tests.helpers.cluster import skip_reason

REASON = skip_reason()
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")


@pytest.mark.timeout(360)  # real time, 25-60 s here: more on a slower machine
def test_six_thousand_jobs_through_kills_cuts_and_a_restart_on_a_cluster(
        tmp_path: Path) -> None:
    plan = ClusterPlan(jobs=6_000, workers=2, faults=(WORKER, CUT, RESTART, WORKER, CUT),
                       strike_every=0.1, pause=0.001)
    result = cluster_chaos(plan, tmp_path)
    print("\n" + result.line())
    assert result.primaries_used == 3
    assert result.lost == 0, f"lost: {result.missing}"
    assert result.duplicated <= result.bound, result.line()
    assert result.processor_deaths == 0
    assert result.leftovers == {}, result.leftovers
