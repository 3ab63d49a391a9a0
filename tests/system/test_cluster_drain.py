"""Redis Cluster, the issue's system test: 20,000 jobs over six queues whose keyspaces land on
all three primaries of a real cluster (3 primaries + 3 replicas of Debian's ``redis-server
--cluster-enabled yes``, joined by ``redis-cli --cluster create``), drained by two ``wurk
worker`` processes while the primary of the first queue is SIGKILLed and its replica
promoted: every job runs, none is lost, repeats stay within what was in flight; jobs pushed
to the promoted replica's queues afterwards (retried once, scheduled) run too, and the
leader election goes on (``tests.chaos.cluster_run``; docs/scaling.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.cluster_run import PRIMARY, QUEUES, ClusterPlan, cluster_chaos
from tests.helpers.cluster import skip_reason

REASON = skip_reason()
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")


@pytest.mark.timeout(360)  # real time, 25-60 s here: more on a slower machine
def test_twenty_thousand_jobs_on_three_primaries_through_a_primary_killed(
        tmp_path: Path) -> None:
    result = cluster_chaos(ClusterPlan(jobs=20_000, workers=2, faults=(PRIMARY,)), tmp_path)
    print("\n" + result.line())
    # The queues really spread: CLUSTER KEYSLOT of each queue's list, served by a primary
    # whose CLUSTER COUNTKEYSINSLOT saw its keys; the six land on all three primaries.
    assert [p.queue for p in result.placements] == list(QUEUES)
    assert result.primaries_used == 3
    assert all(p.keys >= 1 for p in result.placements)
    assert result.failover_seconds is not None  # a replica was promoted
    # Jobs failing once and jobs scheduled, pushed to the promoted replica's queues, ran:
    # their retries and the scheduler carried on there; so did the leader election.
    assert result.pushed_after_failover == 2 * 2 * 20
    assert result.pushed == 20_000 + result.pushed_after_failover
    assert result.leader is not None
    assert result.lost == 0, f"lost: {result.missing}"
    assert result.duplicated <= result.bound, result.line()
    assert result.processor_deaths == 0
    assert result.leftovers == {}, result.leftovers
