"""``cpu_affinity``: reading the setting, choosing CPUs, pinning a thread."""

from __future__ import annotations

import functools
import itertools
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import pytest

import wurk
from wurk.runtime import affinity


def test_parse_reads_auto_lists_and_ranges() -> None:
    assert affinity.parse(None) is None
    assert affinity.parse("none") is None
    assert affinity.parse("auto") == "auto"
    assert affinity.parse("1") == frozenset({1})
    assert affinity.parse("0, 2-4") == frozenset({0, 2, 3, 4})


@pytest.mark.parametrize("spec, message", [
    ("", "'' is not a CPU number"),
    ("one", "'one' is not a CPU number"),
    ("3-1", "'3-1' is not a valid range"),
    ("-1", "is not a CPU number"),
])
def test_bad_values_are_named(spec: str, message: str) -> None:
    with pytest.raises(wurk.ConfigError, match=message):
        affinity.parse(spec)
    with pytest.raises(wurk.ConfigError, match="cpu_affinity"):
        wurk.Config(cpu_affinity=spec)


def test_a_value_that_is_not_text_is_refused() -> None:
    with pytest.raises(wurk.ConfigError, match="cpu_affinity must be text"):
        wurk.Config(cpu_affinity=1)  # type: ignore[arg-type]


def test_choose_spreads_swarm_children_and_picks_one_cpu_alone() -> None:
    cpus = affinity.allowed()
    assert affinity.choose(None) is None
    chosen = affinity.choose("auto")
    assert chosen is not None and len(chosen) == 1 and chosen <= set(cpus)
    by_slot = [affinity.choose("auto", slot=slot) for slot in range(len(cpus))]
    assert [next(iter(c)) for c in by_slot if c] == cpus  # one child per CPU, in order
    assert affinity.choose(",".join(map(str, cpus))) == frozenset(cpus)


def test_a_cpu_outside_the_allowed_set_is_refused() -> None:
    outside = max(affinity.allowed()) + 1
    with pytest.raises(wurk.ConfigError, match=f"CPU {outside} is not available"):
        affinity.choose(str(outside))


def _in_thread(pinning: affinity.Pinning, started: threading.Event,
               done: threading.Event, seen: list[set[int]], *,
               scout: bool = False) -> threading.Thread:
    def run() -> None:
        pinning.enter(scout=scout)
        seen.append(os.sched_getaffinity(0))
        started.set()
        done.wait(10)
        seen.append(os.sched_getaffinity(0))
        pinning.leave()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_fixed_pinning_holds_the_entering_thread_only() -> None:
    cpus = affinity.allowed()
    pinning = affinity.Pinning(frozenset({cpus[-1]}), lambda: 0, adaptive=False)
    started, done, seen = threading.Event(), threading.Event(), []
    thread = _in_thread(pinning, started, done, seen)
    started.wait(10)
    pinning.sample()  # a fixed choice ignores the load
    done.set()
    thread.join()
    assert seen == [{cpus[-1]}, {cpus[-1]}]
    assert sorted(os.sched_getaffinity(0)) == cpus  # this thread is untouched


@functools.cache
def _batch_allowed() -> bool:
    """Whether this host lets a thread take SCHED_BATCH (a sandbox may forbid it; wurk then
    only places the threads)."""
    outcome: list[bool] = []

    def probe() -> None:
        try:
            os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
            outcome.append(True)
        except OSError:
            outcome.append(False)

    thread = threading.Thread(target=probe)
    thread.start()
    thread.join(10)
    return outcome == [True]


def _held_policy() -> int:
    """What a held thread runs under here: batch, or normal where the host forbids batch."""
    return os.SCHED_BATCH if _batch_allowed() else os.SCHED_OTHER


def test_held_threads_run_batch_and_what_they_start_inherits_it() -> None:
    """Held to its CPU a processor thread is SCHED_BATCH (a woken one does not preempt the
    GIL's holder); a program it starts inherits the policy and the CPU (docs/worker.md);
    other threads are untouched."""
    if not _batch_allowed():
        pytest.skip("this host forbids SCHED_BATCH: threads are only placed")
    cpus = affinity.allowed()
    pinning = affinity.Pinning(frozenset({cpus[-1]}), lambda: 0, adaptive=False)
    seen: list[int] = []

    def run() -> None:
        pinning.enter()
        seen.append(os.sched_getscheduler(0))
        child = subprocess.run(
            [sys.executable, "-c",
             "import os; print(os.sched_getscheduler(0), *os.sched_getaffinity(0))"],
            capture_output=True, text=True, timeout=30, check=True)
        seen.extend(int(word) for word in child.stdout.split())
        pinning.leave()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(30)
    assert seen == [os.SCHED_BATCH, os.SCHED_BATCH, cpus[-1]]
    assert os.sched_getscheduler(0) == os.SCHED_OTHER


class Clock:
    """The guard's time, moved by the test: no sleeps, no load-dependent timing."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


P, S, F = affinity.PINNED, affinity.SCOUT, affinity.FREE


class Fake:
    """A process whose jobs run at ``rates[placement]`` per second, its processor threads
    using ``cores[placement]`` cores: the two things the guard measures, on the synthetic
    ``clock``. Pinned, the threads use at most one core."""

    def __init__(self, *, cores: float, pinned_rate: float, free_rate: float,
                 scout_cores: float, scout_rate: float) -> None:
        self.cores = {P: min(cores, 1.0), S: scout_cores, F: cores}
        self.rates = {P: pinned_rate, S: scout_rate, F: free_rate}
        self.running = 10
        self.clock = Clock()
        self.pinning = affinity.Pinning(frozenset({affinity.allowed()[-1]}),
                                        lambda: self.running, adaptive=True, done=self.done,
                                        cpu=self.cpu, busy=lambda: None, clock=self.clock)
        self._cpu = self._done = 0.0
        self._at = self.clock.now

    def _advance(self) -> None:
        placement = self.pinning.placement
        elapsed = self.clock.now - self._at
        self._cpu += elapsed * self.cores[placement]
        self._done += elapsed * self.rates[placement]
        self._at = self.clock.now

    def cpu(self, threads: object) -> float:
        self._advance()
        return self._cpu

    def done(self) -> int:
        self._advance()
        return int(self._done)

    def run(self, seconds: float) -> list[tuple[float, str]]:
        """Samples every SAMPLE_INTERVAL for ``seconds``: the changes of placement, each as
        (seconds from the start, placement), the placement before the first sample
        included."""
        start, state = self.clock.now, self.pinning.placement
        changes = [(0.0, state)]
        for _ in range(round(seconds / affinity.SAMPLE_INTERVAL)):
            self.clock.now += affinity.SAMPLE_INTERVAL
            self.pinning.sample()
            if self.pinning.placement != state:
                state = self.pinning.placement
                changes.append((round(self.clock.now - start, 6), state))
        return changes

    def quiet(self, seconds: float) -> list[tuple[float, str]]:
        self.running = 0
        changes = self.run(seconds)
        self.running = 10
        return changes


W, STEP = affinity.WINDOW, affinity.SAMPLE_INTERVAL


def near(changes: list[tuple[float, str]], expected: list[tuple[float, str]]) -> bool:
    """``changes`` are ``expected``, each time within one sample of it."""
    return len(changes) == len(expected) and all(
        state == want and abs(at - when) <= STEP + 1e-9
        for (at, state), (when, want) in zip(changes, expected, strict=True))


def gil_bound() -> Fake:
    """GIL-bound jobs: one core however placed; pinned they run fastest, and a scout
    handing the GIL across cores costs a quarter or more (as measured: 15.5k against 21k
    jobs/s, and 6.3k against 8.2k with redis-py bodies)."""
    return Fake(cores=1.0, pinned_rate=5000, free_rate=3000, scout_cores=1.0,
                scout_rate=3800)


def close_call() -> Fake:
    """GIL-bound jobs whose scout window comes within LOSING of the pinned rate (a machine
    where handing the GIL across CPUs is cheap): the window runs its whole length."""
    return Fake(cores=1.0, pinned_rate=5000, free_rate=4600, scout_cores=1.0,
                scout_rate=4750)


def losing() -> Fake:
    """GIL-bound jobs whose scout loses a third and more (redis-py bodies: 6.0k against
    10.9k jobs/s in one measured window)."""
    return Fake(cores=1.0, pinned_rate=5000, free_rate=3000, scout_cores=1.0,
                scout_rate=3000)


def parallel() -> Fake:
    """Jobs computing with the GIL released: two cores free, 1.7 with one scout (as measured
    with SHA-256 jobs), half the jobs pinned."""
    return Fake(cores=1.9, pinned_rate=5000, free_rate=9500, scout_cores=1.7,
                scout_rate=8600)


def test_a_backlog_is_pinned_at_the_first_sample() -> None:
    """A fresh worker with a backlog: the first sample decides (the average is over the
    samples so far), and the guard pins at once — the trial runs first."""
    fake = gil_bound()
    assert fake.run(STEP) == [(0.0, F), (STEP, P)]
    fake = gil_bound()
    fake.running = 0  # the processors still starting: one sample sees nothing
    fake.pinning.sample()
    fake.running = 3  # quick jobs: three of ten threads in a job at any sample
    assert fake.run(STEP) == [(0.0, F), (STEP, P)]


def test_the_pinned_trial_comes_first_then_a_scout_window_then_the_verdict() -> None:
    fake = close_call()
    assert near(fake.run(2.0), [(0.0, F), (STEP, P), (STEP + W, S), (STEP + 2 * W, P)])
    assert fake.pinning._guard.verdict == "pinned"


@pytest.mark.parametrize("fake", [losing, gil_bound], ids=["a-third-lost", "a-quarter-lost"])
def test_a_losing_scout_window_is_cut_short_and_pinning_kept(
    fake: Callable[[], Fake],
) -> None:
    """On one core at under LOSING of the pinned rate the scout ends after SCOUT_AT_LEAST,
    not after a whole window: GIL-bound jobs pay for a twentieth of a second, not a
    quarter."""
    made = fake()
    short = STEP + W + affinity.SCOUT_AT_LEAST
    assert near(made.run(2.0), [(0.0, F), (STEP, P), (STEP + W, S), (short, P)])
    assert made.pinning._guard.verdict == "pinned"


@pytest.mark.parametrize("share", [0.5, 0.75, 0.89])
def test_ending_a_scout_window_early_gives_the_whole_windows_verdict(
    share: float, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ending early changes what scouting costs, not what it decides: a scout window on one
    core under LOSING of the pinned rate, run its whole length, keeps pinning as well."""
    def made() -> Fake:
        return Fake(cores=1.0, pinned_rate=5000, free_rate=3000, scout_cores=1.0,
                    scout_rate=5000 * share)

    early = made()
    early.run(2.0)
    monkeypatch.setattr(affinity, "SCOUT_AT_LEAST", 1.0)  # never cut: the whole window
    whole = made()
    changes = whole.run(2.0)
    assert abs(changes[3][0] - (STEP + 2 * W)) <= STEP + 1e-9  # it did run its length
    assert early.pinning._guard.verdict == whole.pinning._guard.verdict == "pinned"


@pytest.mark.parametrize("fake", [close_call, parallel], ids=["within-LOSING", "parallel"])
def test_a_scout_window_not_plainly_losing_runs_its_whole_length(
    fake: Callable[[], Fake],
) -> None:
    """Within LOSING of the pinned rate, or on more than PARALLEL_CORES cores, the scout
    window is not cut: the verdict waits for the whole window's figures."""
    made = fake()
    changes = made.run(2.0)
    assert near(changes[:4], [(0.0, F), (STEP, P), (STEP + W, S), changes[3]])
    assert abs(changes[3][0] - (STEP + 2 * W)) <= STEP + 1e-9


@pytest.mark.parametrize("pinned_rate, kept", [
    (9000, True),  # pinning pays
    (8800, True),  # a little slower: within what two quarter-seconds differ by
    (8000, False),  # under KEEP of the scout window: starved of a core it had
    (0, False),  # nothing done pinned: nothing to tell by, so not pinned
])
def test_the_trial_keeps_pinning_unless_it_did_clearly_fewer_jobs(
    pinned_rate: float, kept: bool,
) -> None:
    """On a machine loaded by others a parallel job may get under PARALLEL_CORES cores even
    with a scout: the rates decide."""
    fake = Fake(cores=0.6, pinned_rate=pinned_rate, free_rate=10000, scout_cores=0.6,
                scout_rate=10000)
    changes = fake.run(5.0)
    assert near(changes[:4], [(0.0, F), (STEP, P), (STEP + W, S), (STEP + 2 * W, P)])
    # set free only after a second pinned window (confirming) did as badly
    assert changes[4:] == ([] if kept else [changes[4]]) and \
        (kept or near(changes[4:], [(STEP + 3 * W, F)]))
    assert fake.pinning._guard.verdict == ("pinned" if kept else "free")


def test_windows_in_which_no_job_ended_keep_pinning_and_measure_again_later() -> None:
    """No job ended in the pinned windows nor in the scout's, on one core (a thousand async
    jobs' clients connecting at the start, or jobs longer than a window): nothing to tell
    by, so the threads stay pinned, and are measured again after RETRY — not set free for
    HOLD on no evidence (which made the async row at 1,000 at once run unpinned in some
    runs and pinned in others)."""
    fake = Fake(cores=0.9, pinned_rate=0, free_rate=0, scout_cores=0.9, scout_rate=0)
    changes = fake.run(affinity.RETRY)
    assert near(changes, [(0.0, F), (STEP, P), (STEP + W, S), (STEP + 2 * W, P)])
    assert fake.pinning._guard.verdict == "pinned"
    fake.rates = {P: 9000, S: 8000, F: 8000}  # the jobs flow now: measured again, kept
    changes = fake.run(2.0)
    assert [state for _, state in changes] == [P, S, P]  # a scout again, plainly losing
    assert fake.pinning._guard.verdict == "pinned"


def test_jobs_computing_in_parallel_are_held_free_after_one_scout_window() -> None:
    """Over PARALLEL_CORES cores with one thread free the jobs compute in parallel: free for
    HOLD, even where the rates alone would not tell (here the trial did a few more jobs),
    and at once: a second pinned window would cost such jobs their cores for a window."""
    fake = Fake(cores=1.9, pinned_rate=9000, free_rate=8000, scout_cores=1.7,
                scout_rate=8000)
    assert near(fake.run(affinity.HOLD), [(0.0, F), (STEP, P), (STEP + W, S),
                                          (STEP + 2 * W, F)])


def test_a_first_trial_spoilt_by_the_start_does_not_set_the_threads_free() -> None:
    """The first pinned window opens as the jobs start; if the start takes a share of it
    (each thread's client connecting at its first job), a scout window can beat it though
    pinning pays. The second pinned window, before any thread is set free, shows it: the
    better of the two is what the scout is held against."""
    fake = Fake(cores=1.0, pinned_rate=5000, free_rate=3000, scout_cores=1.0,
                scout_rate=3800)
    fake.rates[P] = 2500  # the trial, half spent starting
    assert near(fake.run(STEP + W), [(0.0, F), (STEP, P), (STEP + W, S)])
    fake.rates[P] = 5000
    changes = fake.run(affinity.RETRY / 2)
    assert near(changes, [(0.0, S), (W, P)])  # the scout window won, a second trial: kept
    assert fake.pinning._guard.verdict == "pinned" and fake.pinning.pinned


def test_a_second_trial_as_spoilt_as_the_first_sets_them_free() -> None:
    """Where pinning really loses (both pinned windows), the threads are set free."""
    fake = Fake(cores=1.0, pinned_rate=2500, free_rate=3000, scout_cores=1.0,
                scout_rate=3800)
    assert near(fake.run(2.0), [(0.0, F), (STEP, P), (STEP + W, S), (STEP + 2 * W, P),
                                (STEP + 3 * W, F)])
    assert fake.pinning._guard.verdict == "free"


def test_more_cores_for_clearly_fewer_jobs_is_not_parallel_work() -> None:
    """A GIL-bound scout on another core may spread the work over two cores handing the GIL
    across them (measured unpinned: a redis-py call per job, 1.6 cores for half the jobs):
    that is waste, not parallel work, and pinning is kept."""
    fake = Fake(cores=1.6, pinned_rate=4000, free_rate=2000, scout_cores=1.4,
                scout_rate=3000)
    changes = fake.run(5.0)
    assert near(changes, [(0.0, F), (STEP, P), (STEP + W, S), (STEP + 2 * W, P)])
    assert fake.pinning._guard.verdict == "pinned"


def test_a_kept_verdict_pins_at_once_after_a_quiet_spell() -> None:
    fake = gil_bound()
    fake.run(1.0)
    assert fake.pinning.pinned
    changes = fake.quiet(5.0)
    assert changes[-1][1] == F and changes[-1][0] < 1.0  # quiet: free, within UNPIN
    # busy again (two samples of ten running after the quiet ones): pinned, and kept so
    assert near(fake.run(affinity.RETRY / 2), [(0.0, F), (2 * STEP, P)])


def test_a_free_verdict_outlives_a_quiet_spell_until_hold_runs_out() -> None:
    fake = parallel()
    assert near(fake.run(1.0), [(0.0, F), (STEP, P), (STEP + W, S), (STEP + 2 * W, F)])
    held_until = fake.pinning._guard.hold_until
    fake.quiet(5.0)
    busy = held_until - fake.clock.now  # the rest of the hold
    assert fake.run(busy - STEP) == [(0.0, F)]  # never pinned again before HOLD ends
    assert near(fake.run(1.0), [(0.0, F), (2 * STEP, P), (2 * STEP + W, S),
                                (2 * STEP + 2 * W, F)])


def test_parallel_jobs_are_pinned_one_window_per_hold() -> None:
    fake = parallel()
    changes = fake.run(3 * affinity.HOLD + 3.0)
    trials_at = [b[0] for a, b in itertools.pairwise(changes) if a[1] == F and b[1] == P]
    assert len(trials_at) == 4  # at the start, then once per HOLD
    for a, b in itertools.pairwise(trials_at):  # HOLD counts from the end of the scout
        assert abs(b - a - (affinity.HOLD + 2 * W)) <= STEP + 1e-9
    durations = [b[0] - a[0] for a, b in itertools.pairwise(changes) if a[1] != F]
    assert all(abs(d - W) <= STEP + 1e-9 for d in durations)  # a trial, a scout: W each


def test_kept_pinning_is_measured_again_every_retry() -> None:
    fake = close_call()
    changes = fake.run(2 * affinity.RETRY + 2.0)
    scouted_at = [at for at, state in changes[1:] if state == S]
    assert len(scouted_at) == 3  # the first scout window, then one per RETRY
    for a, b in itertools.pairwise(scouted_at):  # RETRY counts from the verdict: a trial
        assert abs(b - a - (affinity.RETRY + 2 * W)) <= STEP + 1e-9
    assert all(state != F for _, state in changes[1:])  # never all free
    assert fake.pinning.pinned
    fake.rates[P] = 1000  # the job mix changed: pinning now costs
    changes = fake.run(affinity.RETRY + 1.0)
    assert fake.pinning.placement == F and fake.pinning._guard.verdict == "free"


def test_a_quiet_spell_during_a_window_spoils_it() -> None:
    """A window counts only if the process was busy throughout: the next busy spell starts
    the trial over, and a kept verdict being measured again stays kept."""
    done, cpu = [0], [0.0]
    guard = affinity._Guard(lambda threads: cpu[0], lambda: done[0])
    assert guard.want(set(), busy=True, now=0.0) == P  # the trial opens
    done[0] = 1000
    assert guard.want(set(), busy=False, now=0.1) == F  # quiet in the middle of it
    assert guard.verdict is None and guard.phase is None
    assert guard.want(set(), busy=True, now=5.0) == P  # on trial again, from the start
    assert guard.want(set(), busy=True, now=5.0 + W / 2) == P
    done[0] = 3000
    assert guard.want(set(), busy=True, now=5.0 + W) == S  # the trial: 2000 in W
    done[0], cpu[0] = 4000, W  # the scout: 1000 in W on one core
    assert guard.want(set(), busy=True, now=5.0 + 2 * W) == P and guard.verdict == "pinned"
    retry = 5.0 + 2 * W + affinity.RETRY
    assert guard.want(set(), busy=True, now=retry) == P and guard.phase == "trial"
    assert guard.want(set(), busy=False, now=retry + 0.1) == F
    assert guard.verdict == "pinned" and guard.phase is None
    assert guard.want(set(), busy=True, now=retry + 1.0) == P  # pinned at once: measured again


def test_the_scout_is_one_processor_thread_set_free_while_the_rest_stay() -> None:
    """Scouting moves exactly one processor thread off the pinned CPU — a thread that
    entered as a processor, never the async lane's — and the next scout is another."""
    cpus = affinity.allowed()
    if len(cpus) < 2:
        pytest.skip("one CPU: every placement is the same")
    fake = gil_bound()
    fake.running = 0
    pinning = fake.pinning
    events = [(threading.Event(), threading.Event(), []) for _ in range(3)]
    threads = [_in_thread(pinning, started, done, seen, scout=n < 2)
               for n, (started, done, seen) in enumerate(events)]
    for started, _, _ in events:
        started.wait(10)
    fake.running = 10
    fake.run(STEP)  # the pinned trial opens
    assert pinning.placement == P
    fake.run(W)
    assert pinning.placement == S and pinning.scout is not None
    first = pinning.scout
    assert first in pinning._scouts  # a processor thread
    placed = {native: os.sched_getaffinity(native) for native in pinning._threads}
    assert placed[first] == set(cpus)
    assert all(where == {cpus[-1]} for native, where in placed.items() if native != first)
    policies = {native: os.sched_getscheduler(native) for native in pinning._threads}
    assert policies.pop(first) == os.SCHED_OTHER  # free: a normal thread again
    assert set(policies.values()) == {_held_policy()}
    scouts = [first]
    for _ in range(3):  # measured again every RETRY: each time another processor thread
        while pinning.placement == S:
            fake.run(STEP)
        while pinning.placement != S:
            fake.run(STEP)
        scouts.append(pinning.scout)
    assert set(scouts) == set(pinning._scouts) and len(pinning._scouts) == 2
    assert all(a != b for a, b in itertools.pairwise(scouts))
    for _, done, _ in events:
        done.set()
    for thread in threads:
        thread.join()


def test_adaptive_pinning_follows_the_average_number_of_running_jobs() -> None:
    cpus = affinity.allowed()
    fake = gil_bound()
    fake.running = 0
    pinning = fake.pinning
    started, done, seen = threading.Event(), threading.Event(), []
    thread = _in_thread(pinning, started, done, seen)
    started.wait(10)
    assert seen == [set(cpus)] and pinning.placement == F  # quiet: anywhere
    fake.running = 4
    fake.run(1.0)  # a pinned trial, a scout window, pinning kept
    assert pinning.pinned
    native = next(iter(pinning._threads))
    assert os.sched_getaffinity(native) == {cpus[-1]}  # moved from outside the thread
    assert os.sched_getscheduler(native) == _held_policy()
    fake.running = 1  # one job at a time: no GIL contention, but not quiet enough to flip
    fake.run(affinity.SAMPLES * STEP)
    assert pinning.pinned
    fake.running = 0
    fake.run(affinity.SAMPLES * STEP)
    assert pinning.placement == F
    assert os.sched_getscheduler(native) == os.SCHED_OTHER  # set free: a normal thread again
    done.set()
    thread.join()
    assert seen[-1] == set(cpus)
    pinning.sample()  # the thread is gone: nothing to move, no error


class Neighbours:
    """Two CPUs' busy seconds and the process's own CPU, moved by the test: the pinned
    threads use ``ours`` of their CPU, others ``crowd`` of it and ``elsewhere`` of CPU 1."""

    def __init__(self, *, ours: float, crowd: float, elsewhere: float) -> None:
        self.ours, self.crowd, self.elsewhere = ours, crowd, elsewhere
        self.clock = Clock()
        self.running = 10
        self._busy = [0.0, 0.0]
        self._ours = 0.0
        self._at = self.clock.now
        self.pinning = affinity.Pinning(frozenset({0}), lambda: self.running, adaptive=True,
                                        cpu=self.cpu, busy=self.busy, own=self.own,
                                        clock=self.clock)
        self.pinning._anywhere = frozenset({0, 1})  # two CPUs, whatever this machine has
        self.pinning._guard.verdict, self.pinning._guard.pinned_at = "pinned", self.clock.now

    def _advance(self) -> None:
        elapsed, self._at = self.clock.now - self._at, self.clock.now
        if not self.pinning.pinned:
            return
        (here,) = self.pinning.cpus
        self._busy[here] += elapsed * (self.ours + self.crowd)
        self._busy[1 - here] += elapsed * self.elsewhere
        self._ours += elapsed * self.ours

    def cpu(self, threads: object) -> float:
        self._advance()
        return self._ours

    def own(self) -> float:
        return self.cpu(())

    def busy(self) -> list[float]:
        self._advance()
        return list(self._busy)

    def run(self, seconds: float) -> None:
        for _ in range(round(seconds / affinity.SAMPLE_INTERVAL)):
            self.clock.now += affinity.SAMPLE_INTERVAL
            self.pinning.sample()


def test_pinned_threads_crowded_by_others_move_to_an_idler_cpu() -> None:
    """Redis on the threads' CPU takes 0.4 of it while the other CPU idles: the threads
    move there, within a couple of windows, and stay."""
    watched = Neighbours(ours=0.6, crowd=0.4, elsewhere=0.05)
    watched.run(STEP + 2 * W + STEP)
    assert watched.pinning.cpus == {1} and watched.pinning.pinned
    watched.crowd, watched.elsewhere = 0.0, 0.4  # the others stayed behind, on CPU 0
    watched.run(10 * affinity.MOVE_GAP)
    assert watched.pinning.cpus == {1}


@pytest.mark.parametrize("crowd, elsewhere", [
    (0.1, 0.0),  # others take little of the CPU: not worth a move
    (0.4, 0.9),  # crowded, but every other CPU is busier
    (0.4, 0.3),  # crowded, and the other CPU not idler by MARGIN
])
def test_threads_stay_unless_crowded_and_an_idler_cpu_is_there(crowd: float,
                                                               elsewhere: float) -> None:
    watched = Neighbours(ours=0.9, crowd=crowd, elsewhere=elsewhere)
    watched.run(5.0)
    assert watched.pinning.cpus == {0}


def test_a_move_waits_move_gap_after_the_last() -> None:
    """Two processes crowding each other cannot chase one another round the CPUs: after a
    move the next waits MOVE_GAP, however crowded the new CPU is."""
    watched = Neighbours(ours=0.6, crowd=0.4, elsewhere=0.0)
    watched.run(STEP + 2 * W + STEP)
    assert watched.pinning.cpus == {1}
    moved_at = watched.pinning._moved_at
    watched.elsewhere = 0.0  # the crowd followed the threads to CPU 1
    watched.run(moved_at + affinity.MOVE_GAP - STEP - watched.clock.now)
    assert watched.pinning.cpus == {1}
    watched.run(2 * W + 2 * STEP)
    assert watched.pinning.cpus == {0} and watched.pinning._moved_at >= moved_at + \
        affinity.MOVE_GAP


def test_explicit_cpus_never_move() -> None:
    watched = Neighbours(ours=0.6, crowd=0.4, elsewhere=0.0)
    watched.pinning.adaptive = False
    watched.pinning.placement = affinity.PINNED
    watched.run(5.0)
    assert watched.pinning.cpus == {0}


def test_process_cpu_counts_this_process_to_the_microsecond() -> None:
    before = affinity.process_cpu()
    deadline = time.process_time() + 0.05
    while time.process_time() < deadline:
        pass
    after = affinity.process_cpu()
    assert before is not None and after is not None
    assert 0.04 <= after - before < 5.0
