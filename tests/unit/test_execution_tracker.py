"""The execution tracker counts every success once, whatever the threads and flushes do."""

from __future__ import annotations

from tests.helpers.threads import race
from wurk.metrics import ExecutionTracker, bucket_of
from wurk.metrics.tracking import FOLD_AT, JobCounts


def test_successes_from_many_threads_are_each_counted_once_while_flushes_take_them() -> None:
    tracker = ExecutionTracker()
    threads_, each = 8, 5_001  # not a multiple of FOLD_AT: the last take folds the rest
    names = ("A", "B", "C")
    taken: list[dict[str, JobCounts]] = []

    def work(n: int) -> None:
        for i in range(each):
            tracker.succeeded(names[i % 3], float((n * each + i) % 40))  # whole ms: exact sums

    race(work, threads_, against=lambda: taken.append(tracker.take()))  # the beat's flush
    taken.append(tracker.take())
    total: dict[str, JobCounts] = {}
    for part in taken:
        for name, counts in part.items():
            total.setdefault(name, JobCounts()).merge(counts)
    expected = {name: JobCounts() for name in names}
    for n in range(threads_):
        for i in range(each):
            ms = float((n * each + i) % 40)
            counts = expected[names[i % 3]]
            counts.processed += 1
            counts.ms += ms
            counts.histogram[bucket_of(ms)] += 1
    assert total == expected


def test_successes_still_waiting_are_in_pending_and_in_the_next_take() -> None:
    tracker = ExecutionTracker()
    for _ in range(FOLD_AT - 1):  # not yet folded
        tracker.succeeded("A", 25.0)
    tracker.failed("A")
    pending = tracker.pending()["A"]
    assert (pending.processed, pending.failed, pending.ms) == (FOLD_AT, 1, 25.0 * (FOLD_AT - 1))
    assert pending.histogram[bucket_of(25.0)] == FOLD_AT - 1
    assert tracker.take()["A"].processed == FOLD_AT
    assert tracker.take() == {}
