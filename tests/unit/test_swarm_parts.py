"""The swarm's pure parts: backoff, the rolling-restart machine, settings, notices, and the
supervisor's rule for a second stop signal."""

from __future__ import annotations

import logging
import os
import select
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

import wurk
from wurk import log as wurk_log
from wurk.errors import ConfigError
from wurk.runtime.signals import HURRY_HINT
from wurk.swarm.child import NoticePipe, OrphanGuard
from wurk.swarm.respawn import RespawnSchedule
from wurk.swarm.restart import Claim, Phase, RestartHooks, RollingRestart
from wurk.swarm.settings import SwarmSettings, default_count, resolve
from wurk.swarm.supervisor import (
    Child,
    Supervisor,
    _close_handle,
    _handle_of,
    describe_status,
)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


# -- backoff ---------------------------------------------------------------------------------
def test_backoff_doubles_per_slot_up_to_the_cap() -> None:
    clock = Clock()
    backoff = RespawnSchedule(base=1, cap=5, reset_after=60, clock=clock)
    assert [backoff.fail(0, lifetime=1) for _ in range(5)] == [1, 2, 4, 5, 5]
    assert backoff.fail(1, lifetime=1) == 1  # another slot has its own count


def test_backoff_stays_at_the_cap_however_long_a_slot_keeps_crashing() -> None:
    # Hours of a crash loop at the cap: 2.0 ** 1024 overflows, and the supervise loop must
    # not die of it (the slot is respawned every ``cap`` seconds for as long as it takes).
    backoff = RespawnSchedule(base=1, cap=30, reset_after=60, clock=Clock())
    delays = [backoff.fail(0, lifetime=1) for _ in range(2_000)]
    assert delays[-1] == 30 and backoff.failures(0) == 2_000


def test_a_long_lived_child_counts_as_a_fresh_failure() -> None:
    backoff = RespawnSchedule(base=1, cap=30, reset_after=60, clock=Clock())
    backoff.fail(0, lifetime=1)
    backoff.fail(0, lifetime=1)
    assert backoff.fail(0, lifetime=61) == 1
    assert backoff.failures(0) == 1


def test_backoff_due_times_without_sleeping() -> None:
    clock = Clock()
    backoff = RespawnSchedule(base=1, cap=30, reset_after=60, clock=clock)
    backoff.fail(0)
    backoff.fail(1)
    backoff.fail(1)
    assert backoff.due() == [] and backoff.pending(0)
    clock.now += 1
    assert backoff.due() == [0]
    backoff.consume(0)
    assert not backoff.pending(0) and backoff.failures(0) == 1
    clock.now += 1
    assert backoff.due() == [1]
    backoff.reset(1)
    assert backoff.due() == [] and backoff.failures(1) == 0


# -- the rolling restart ---------------------------------------------------------------------
@dataclass
class World:
    """The supervisor as the machine sees it: children by pid, signals sent, forks made."""

    clock: Clock = field(default_factory=Clock)
    slots: dict[int, int] = field(default_factory=lambda: {10: 0, 11: 1, 12: 2})
    seen: set[int] = field(default_factory=set)
    kills: list[tuple[int, int]] = field(default_factory=list)
    forks: list[int] = field(default_factory=list)
    fork_errors: int = 0
    next_pid: int = 100

    def spawn(self, slot: int) -> int:
        if self.fork_errors:
            self.fork_errors -= 1
            raise BlockingIOError("fork: EAGAIN")
        self.next_pid += 1
        self.slots[self.next_pid] = slot
        self.forks.append(self.next_pid)
        return self.next_pid

    def machine(self, *, heartbeat_wait: float = 60, drain: float = 30) -> RollingRestart:
        hooks = RestartHooks(spawn=self.spawn, kill=lambda pid, s: self.kills.append((pid, s)),
                             seen=self.seen.__contains__, slot_of=self.slots.get,
                             now=self.clock)
        return RollingRestart(hooks, heartbeat_wait=heartbeat_wait, drain_timeout=drain,
                              backoff=RespawnSchedule(base=1, cap=8, reset_after=60,
                                                        clock=self.clock))

    def exit(self, machine: RollingRestart, pid: int) -> Claim:
        del self.slots[pid]
        return machine.claim_exit(pid)


def test_one_slot_at_a_time_replacement_first() -> None:
    world = World()
    machine = world.machine()
    machine.enqueue([10, 11])
    machine.advance()
    assert world.forks == [101] and world.kills == []  # replacement forked, old untouched
    machine.advance()
    assert world.kills == []  # no heartbeat yet: the old child keeps working
    world.seen.add(101)
    machine.advance()
    assert world.kills == [(10, signal.SIGTERM)]
    machine.advance()
    assert world.forks == [101]  # the next slot waits for this one's drain
    assert world.exit(machine, 10) is Claim.RETIRED
    machine.advance()
    assert world.forks == [101, 102] and world.slots[102] == 1


def test_no_heartbeat_in_time_stops_the_old_child_anyway() -> None:
    world = World()
    machine = world.machine(heartbeat_wait=5)
    machine.enqueue([10])
    machine.advance()
    world.clock.now += 4.9
    machine.advance()
    assert world.kills == []
    world.clock.now += 0.2
    machine.advance()
    assert world.kills == [(10, signal.SIGTERM)]


def test_an_old_child_that_will_not_drain_is_killed_once() -> None:
    world = World()
    machine = world.machine(drain=30)
    machine.enqueue([10])
    machine.advance()
    world.seen.add(101)
    machine.advance()
    world.clock.now += 31
    machine.advance()
    machine.advance()
    assert world.kills == [(10, signal.SIGTERM), (10, signal.SIGKILL)]


def test_a_replacement_that_dies_booting_is_tried_again_after_a_backoff() -> None:
    world = World()
    machine = world.machine()
    machine.enqueue([10])
    machine.advance()
    assert world.exit(machine, 101) is Claim.RETRYING
    machine.advance()
    assert world.forks == [101]  # backoff of 1 s first
    world.clock.now += 1
    machine.advance()
    assert world.forks == [101, 102] and world.kills == []


def test_a_failed_fork_keeps_the_old_child_and_retries() -> None:
    world = World(fork_errors=1)
    machine = world.machine()
    machine.enqueue([10])
    machine.advance()
    assert world.forks == [] and machine.current is not None
    assert machine.current.phase is Phase.SPAWN
    world.clock.now += 1
    machine.advance()
    assert world.forks == [101]


def test_exits_the_machine_does_not_own() -> None:
    world = World()
    machine = world.machine()
    assert world.exit(machine, 12) is Claim.NONE
    machine.enqueue([10])
    world.fork_errors = 1
    machine.advance()  # no replacement yet
    assert world.exit(machine, 10) is Claim.NONE  # a crash: the supervisor respawns the slot
    assert not machine.active


def test_a_replacement_dying_after_the_switch_is_an_ordinary_crash() -> None:
    world = World()
    machine = world.machine()
    machine.enqueue([10])
    machine.advance()
    world.seen.add(101)
    machine.advance()
    assert world.exit(machine, 101) is Claim.NONE
    assert world.exit(machine, 10) is Claim.RETIRED


def test_queue_skips_duplicates_and_dead_children_and_abort_forgets() -> None:
    world = World()
    machine = world.machine()
    machine.enqueue([10, 10, 11])
    machine.advance()
    machine.enqueue([10])  # 10 is being replaced
    assert machine.involves(11) and not machine.involves(12)
    del world.slots[11]  # died while queued: respawned as a crash, nothing to replace
    world.seen.add(101)
    machine.advance()
    world.exit(machine, 10)
    machine.advance()
    assert world.forks == [101] and not machine.active
    machine.enqueue([12])
    machine.abort()
    machine.advance()
    assert world.forks == [101] and not machine.active


def test_a_replacement_asking_to_be_replaced_while_its_predecessor_drains_is_replaced_next(
) -> None:
    """A replacement works while the child it replaces drains; one that reaches ``max_jobs``
    then says so once (its only notice): the request waits for this step's end, it is not
    dropped for the replacement's whole life."""
    world = World()
    machine = world.machine()
    machine.enqueue([10])
    machine.advance()  # 101 forked for slot 0
    world.seen.add(101)
    machine.advance()  # 101 heartbeats: 10 is sent TERM and drains
    machine.enqueue([101])  # 101 ran max_jobs jobs already
    machine.enqueue([101])  # asked twice: queued once
    machine.advance()
    assert world.forks == [101]  # nothing overlaps the step under way
    assert world.exit(machine, 10) is Claim.RETIRED
    machine.advance()
    assert world.forks == [101, 102] and world.slots[102] == 0
    assert machine.current is not None and machine.current.old == 101
    world.seen.add(102)
    machine.advance()
    assert world.kills[-1] == (101, signal.SIGTERM)
    world.exit(machine, 101)
    machine.advance()
    assert world.forks == [101, 102] and not machine.active


# -- settings --------------------------------------------------------------------------------
def test_settings_from_the_config_file_section() -> None:
    settings = SwarmSettings.from_mapping({"count": 4, ":max_memory_mb": 512, "max_jobs": 0})
    assert (settings.count, settings.max_memory_mb, settings.max_jobs) == (4, 512, 0)
    assert settings.as_dict()["tick"] == 0.2


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"count": 0}, "swarm count must be a whole number of at least 1, not 0"),
        ({"count": "4"}, "swarm count must be a whole number"),
        ({"max_memory_mb": -1}, "swarm max_memory_mb must be a whole number of at least 0"),
        ({"max_jobs": True}, "swarm max_jobs must be a whole number"),
        ({"tick": 0}, "swarm tick must be a number of seconds > 0"),
        ({"heartbeat_wait": -1}, "swarm heartbeat_wait must be a number of seconds ≥ 0"),
        ({"tick": float("nan")}, "swarm tick must be a number of seconds > 0, not nan"),
        ({"backoff_max": float("inf")}, "swarm backoff_max must be a number of seconds"),
        ({"heartbeat_wait": float("nan")}, "swarm heartbeat_wait must be a number of seconds"),
        ({"backoff_base": 10**400}, "swarm backoff_base must be a number of seconds"),
        ({"children": 2}, "unknown swarm setting 'children'"),
    ],
)
def test_bad_swarm_settings_are_named(section: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        SwarmSettings.from_mapping(section, source="wurk.yml")


def test_swarm_section_must_be_a_mapping() -> None:
    with pytest.raises(ConfigError, match="swarm must be a mapping"):
        resolve([4], {}, environ={})  # type: ignore[arg-type]


def test_flags_beat_the_file_which_beats_the_environment() -> None:
    env = {"WURK_COUNT": "3", "WURK_MAXMEM_MB": "256"}
    assert resolve(None, {}, environ=env).count == 3
    assert resolve(None, {}, environ=env).max_memory_mb == 256
    assert resolve({"count": 5}, {}, environ=env).count == 5
    assert resolve({"count": 5}, {"count": 7, "max_jobs": None}, environ=env).count == 7
    assert resolve(None, {}, environ={}).count == default_count() >= 1


def test_environment_counts_as_sidekiq_reads_them() -> None:
    assert resolve(None, {}, environ={"SIDEKIQ_COUNT": "2.5"}).count == 2
    assert resolve(None, {}, environ={"WURK_COUNT": "0.25"}).count == 1
    assert resolve(None, {}, environ={"SIDEKIQ_MAXMEM_MB": "300"}).max_memory_mb == 300
    with pytest.raises(ConfigError, match="WURK_COUNT='lots' is not a number"):
        resolve(None, {}, environ={"WURK_COUNT": "lots"})


@pytest.mark.parametrize("text", ["inf", "-inf", "1e400"])
def test_an_infinite_count_in_the_environment_is_named(text: str) -> None:
    with pytest.raises(ConfigError, match=f"WURK_COUNT='{text}' is not a number"):
        resolve(None, {}, environ={"WURK_COUNT": text})


# -- notices, the orphan guard, exit statuses ------------------------------------------------
def test_notices_arrive_whole_one_line_each() -> None:
    pipe = NoticePipe()
    try:
        assert pipe.receive() == []
        assert pipe.send("recycle", "after 20 jobs")
        assert pipe.send("boot-error", "RuntimeError: two\nlines")
        got = pipe.receive()
        assert [(n.pid, n.kind, n.text) for n in got] == [
            (os.getpid(), "recycle", "after 20 jobs"),
            (os.getpid(), "boot-error", "RuntimeError: two lines"),
        ]
        pipe.send("boot-error", "x" * 10_000)
        (long,) = pipe.receive()
        assert len(long.text.encode()) < select.PIPE_BUF
    finally:
        pipe.close()


def test_a_notice_to_a_closed_pipe_is_dropped_not_raised() -> None:
    pipe = NoticePipe()
    pipe.close()
    assert pipe.send("recycle") is False


def test_orphan_guard_compares_the_parent_pid() -> None:
    assert not OrphanGuard(os.getppid()).orphaned()
    assert OrphanGuard(os.getppid() + 1).orphaned()


def test_exit_statuses_are_described() -> None:
    assert describe_status(0) == "exited with status 0"
    assert describe_status(78 << 8) == "exited with status 78"
    assert describe_status(signal.SIGKILL) == "was killed by SIGKILL"
    assert describe_status(None) == "exited (status unknown)"


# -- a second stop signal ---------------------------------------------------------------------
class Recording(Supervisor):
    """A supervisor whose signals to its children are written down instead of sent."""

    sent: list[tuple[int, int]]

    def _kill(self, pid: int, signum: int) -> None:
        self.sent.append((pid, signum))


@pytest.fixture
def stopping_swarm() -> Iterator[tuple[Recording, Clock, list[int]]]:
    """A supervisor of two real (sleeping) child processes, so its reaper finds them alive;
    timeout 10 s, shutdown grace 5 s, on a clock the test moves."""
    clock = Clock()
    supervisor = Recording(wurk.Config(timeout=10),
                           SwarmSettings(count=2, tick=0.01, shutdown_grace=5), clock=clock)
    supervisor.sent = []
    sleepers = [subprocess.Popen(["sleep", "60"]) for _ in range(2)]
    for slot, sleeper in enumerate(sleepers):
        supervisor.children[sleeper.pid] = Child(sleeper.pid, slot, f"id{slot}", clock.now)
    try:
        yield supervisor, clock, [sleeper.pid for sleeper in sleepers]
    finally:
        supervisor.close()
        for sleeper in sleepers:
            sleeper.kill()
            sleeper.wait()


def test_a_second_stop_signal_a_second_later_hurries_the_swarm(
    stopping_swarm: tuple[Recording, Clock, list[int]], caplog: pytest.LogCaptureFixture
) -> None:
    supervisor, clock, pids = stopping_swarm
    caplog.set_level(logging.INFO, logger="wurk")

    def signalled(name: str, after: float) -> list[tuple[int, int]]:
        clock.now += after
        del supervisor.sent[:]
        supervisor._signals.push(name)
        supervisor.tick()
        return sorted(supervisor.sent)

    terms = sorted((pid, signal.SIGTERM) for pid in pids)
    supervisor._signals.push("INT")  # a terminal's Ctrl-C and a process manager's TERM:
    assert signalled("TERM", 0) == terms  # read together, one stop
    assert f"swarm: stopping 2 children (up to 15 s); {HURRY_HINT}" in caplog.messages
    assert signalled("INT", 0.9) == []  # within HURRY_AFTER of the first: the same one
    assert not any("stopping now" in line for line in caplog.messages)

    assert signalled("INT", 0.2) == terms  # 1.1 s after the first: relayed again
    assert ("swarm: stopping now: 2 children push their unfinished jobs back to their queues "
            "and exit (killed in 5 s at the latest)") in caplog.messages
    assert signalled("TERM", 1.0) == []  # a third changes nothing
    assert signalled("USR2", 3.9) == [(pid, signal.SIGUSR2) for pid in sorted(pids)]
    assert signalled("USR2", 0.2) == sorted([(pid, signal.SIGUSR2) for pid in pids]
                                            + [(pid, signal.SIGKILL) for pid in pids])


def test_a_stop_leaves_a_child_that_a_rolling_restart_is_draining_to_its_drain(
    stopping_swarm: tuple[Recording, Clock, list[int]]
) -> None:
    """The retiring child had its TERM from the restart: the stop's TERM, a second or more
    later, would be its second one and hurry it (its running jobs cut off and pushed back)
    where the swarm's one TERM promises them the timeout. A second stop signal hurries it
    with the rest."""
    supervisor, clock, pids = stopping_swarm
    old, other = pids
    replacement = subprocess.Popen(["sleep", "60"])

    def spawn(slot: int) -> int:
        supervisor.children[replacement.pid] = Child(replacement.pid, slot, "id-new",
                                                      clock.now, seen=True)
        return replacement.pid

    try:
        supervisor._restart.hooks = replace(supervisor._restart.hooks, spawn=spawn)
        supervisor._restart.enqueue([old])
        supervisor._restart.advance()  # the replacement is forked
        supervisor._restart.advance()  # it heartbeats: the old child is sent TERM
        assert supervisor.sent == [(old, signal.SIGTERM)]
        clock.now += 2  # the old child drains its running jobs
        del supervisor.sent[:]
        supervisor._signals.push("TERM")
        supervisor.tick()
        assert sorted(supervisor.sent) == sorted([(other, signal.SIGTERM),
                                                  (replacement.pid, signal.SIGTERM)])
        clock.now += 1.5
        del supervisor.sent[:]
        supervisor._signals.push("TERM")  # a second one: every child, the retiring one too
        supervisor.tick()
        assert sorted(supervisor.sent) == sorted((pid, signal.SIGTERM)
                                                 for pid in (old, other, replacement.pid))
    finally:
        replacement.kill()
        replacement.wait()


def test_hurrying_never_moves_the_kill_deadline_later(
    stopping_swarm: tuple[Recording, Clock, list[int]]
) -> None:
    supervisor, clock, pids = stopping_swarm
    supervisor.stop()
    clock.now += 14  # the budget is 10 + 5 s: one second is left
    supervisor.hurry()
    del supervisor.sent[:]
    clock.now += 1.05
    supervisor.tick()
    assert sorted(supervisor.sent) == [(pid, signal.SIGKILL) for pid in sorted(pids)]


def test_a_log_file_that_cannot_be_reopened_does_not_end_the_supervise_loop(
    stopping_swarm: tuple[Recording, Clock, list[int]], tmp_path: Path
) -> None:
    """USR2 reopens the parent's log file and is relayed to every child; a file that cannot
    be reopened is reported, and the signal still reaches the children and the swarm goes
    on (a supervise loop ended by it would leave the children to their orphan guard)."""
    supervisor, _, pids = stopping_swarm
    logs = tmp_path / "logs"
    logs.mkdir()
    wurk_log.setup(fmt="plain", logfile=str(logs / "wurk.log"))
    (logs / "wurk.log").unlink()
    logs.rmdir()  # reopening the file now fails
    supervisor._signals.push("USR2")
    supervisor.tick()
    assert sorted(supervisor.sent) == [(pid, signal.SIGUSR2) for pid in sorted(pids)]
    del supervisor.sent[:]
    supervisor._signals.push("TERM")
    supervisor.tick()
    assert sorted(supervisor.sent) == [(pid, signal.SIGTERM) for pid in sorted(pids)]


# -- signals reach the child, never a pid's next owner ----------------------------------------
needs_pidfd = pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="no pidfds here")


@pytest.fixture
def one_child() -> Iterator[tuple[Supervisor, subprocess.Popen[bytes]]]:
    """A supervisor with one real (sleeping) child, registered as a fork would."""
    supervisor = Supervisor(wurk.Config(timeout=10), SwarmSettings(count=1, tick=0.01),
                            clock=Clock())
    sleeper = subprocess.Popen(["sleep", "60"])
    supervisor.children[sleeper.pid] = Child(sleeper.pid, 0, "id0", 0.0,
                                             handle=_handle_of(sleeper.pid))
    try:
        yield supervisor, sleeper
    finally:
        for child in supervisor.children.values():  # not reaped by the test: its pidfd
            _close_handle(child)
        supervisor.close()
        sleeper.kill()
        sleeper.wait()


@needs_pidfd
def test_a_signal_goes_through_the_childs_pidfd(
        one_child: tuple[Supervisor, subprocess.Popen[bytes]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    supervisor, sleeper = one_child
    assert supervisor.children[sleeper.pid].handle is not None
    monkeypatch.setattr(os, "kill", _no_kill_by_pid)
    supervisor._kill(sleeper.pid, signal.SIGTERM)
    assert sleeper.wait(10) == -signal.SIGTERM


@needs_pidfd
def test_a_child_reaped_by_someone_else_is_never_signalled_by_its_pid(
        one_child: tuple[Supervisor, subprocess.Popen[bytes]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A host ignoring SIGCHLD has the kernel reap a child at once: its pid is free for any
    new process before the supervisor notices. The signal still goes to the child's own
    pidfd, which answers that it is gone — the pid is never used."""
    supervisor, sleeper = one_child
    sleeper.kill()
    sleeper.wait()  # reaped, not by the supervisor
    monkeypatch.setattr(os, "kill", _no_kill_by_pid)
    supervisor._kill(sleeper.pid, signal.SIGTERM)  # no error: gone, the reaper will see it
    supervisor._reap()  # waitpid says "not my child": counted as exited
    assert supervisor.children == {}


def test_a_pid_that_is_no_child_any_more_is_not_signalled(
        monkeypatch: pytest.MonkeyPatch) -> None:
    supervisor = Supervisor(wurk.Config(timeout=10), SwarmSettings(count=1), clock=Clock())
    try:
        monkeypatch.setattr(os, "kill", _no_kill_by_pid)
        supervisor._kill(os.getpid(), signal.SIGTERM)  # reaped earlier: not ours to signal
    finally:
        supervisor.close()


@needs_pidfd
def test_the_pidfd_is_closed_when_the_child_is_reaped(
        one_child: tuple[Supervisor, subprocess.Popen[bytes]]) -> None:
    supervisor, sleeper = one_child
    handle = supervisor.children[sleeper.pid].handle
    assert handle is not None
    supervisor._kill(sleeper.pid, signal.SIGKILL)
    for _ in range(1000):  # up to 10 s for the kernel to let it go
        supervisor._reap()
        if not supervisor.children:
            break
        select.select([], [], [], 0.01)
    assert supervisor.children == {}
    with pytest.raises(OSError):
        os.fstat(handle)


def _no_kill_by_pid(pid: int, signum: int) -> None:
    raise AssertionError(f"os.kill({pid}, {signum}): a signal by pid")


def test_the_swarm_settings_default_to_what_swarm_md_lists() -> None:
    """swarm.md's table of settings and their defaults; the count is the CPU cores."""
    settings = resolve(None, {}, environ={})
    assert settings.count == default_count() == len(os.sched_getaffinity(0))
    assert (settings.max_memory_mb, settings.max_jobs) == (0, 0)
    assert (settings.tick, settings.memory_check_interval, settings.heartbeat_wait) \
        == (0.2, 10, 60)
    assert (settings.backoff_base, settings.backoff_max, settings.backoff_reset) == (1, 30, 60)
    assert (settings.shutdown_grace, settings.boot_attempts) == (5, 3)
    assert resolve(None, {}, environ={"WURK_COUNT": "3", "SIDEKIQ_COUNT": "5"}).count == 3


# -- a TERM while the parent is still forking --------------------------------------------------
class TermedWhileForking(Recording):
    """Its first fork is a sleeper, and the parent is sent TERM in the middle of it."""

    sleepers: list[subprocess.Popen[bytes]]

    def _spawn(self, slot: int) -> int:
        sleeper = subprocess.Popen(["sleep", "60"])
        self.sleepers.append(sleeper)
        self.children[sleeper.pid] = Child(sleeper.pid, slot, f"id{slot}", self._clock())
        if slot == 0:
            os.kill(os.getpid(), signal.SIGTERM)
        return sleeper.pid


def test_a_term_while_the_parent_is_forking_is_queued_not_fatal() -> None:
    """swarm.md: the parent installs its handlers before the first fork, so a TERM that
    arrives while it is still forking is queued (taken at the next tick), not fatal."""
    config = wurk.Config(timeout=10, redis_url="redis://127.0.0.1:1/0")
    supervisor = TermedWhileForking(config, SwarmSettings(count=2, tick=0.01))
    supervisor.sent, supervisor.sleepers = [], []
    try:
        supervisor.boot()  # would end this process with TERM's default action
        assert len(supervisor.children) == 2  # the second slot is forked all the same
        supervisor.tick()
        pids = sorted(sleeper.pid for sleeper in supervisor.sleepers)
        assert sorted(supervisor.sent) == [(pid, signal.SIGTERM) for pid in pids]
    finally:
        supervisor.close()  # the handlers it installed are put back
        for sleeper in supervisor.sleepers:
            sleeper.kill()
            sleeper.wait()


def test_a_zero_memory_limit_in_the_environment_means_off() -> None:
    # docs/swarm.md: max_memory_mb 0 is off, WURK_MAXMEM_MB included; read as 1 MB, every
    # child (all over 1 MB) would be replaced at each memory check, in a loop.
    assert resolve(None, {}, environ={"WURK_MAXMEM_MB": "0"}).max_memory_mb == 0
    assert resolve(None, {}, environ={"SIDEKIQ_MAXMEM_MB": "0.5"}).max_memory_mb == 0
    with pytest.raises(ConfigError, match="WURK_MAXMEM_MB='-5' is not"):
        resolve(None, {}, environ={"WURK_MAXMEM_MB": "-5"})
    with pytest.raises(ConfigError, match="SIDEKIQ_COUNT='-2' is not"):
        resolve(None, {}, environ={"SIDEKIQ_COUNT": "-2"})


# -- a child that cannot boot, though its first heartbeat was seen -----------------------------
class FailingLate(Recording):
    """Each fork is a process that exits 78 after saying ``boot-error``, as a child whose
    boot failed after its first heartbeat does — a heartbeat this parent saw in between."""

    failed: list[subprocess.Popen[bytes]]

    def _spawn(self, slot: int) -> int:
        child = subprocess.Popen(["sh", "-c", "exit 78"])
        self.failed.append(child)
        record = self._adopt(child.pid, slot)
        os.write(self._notices._write,
                 f"{child.pid} boot-error RuntimeError: boot failed late\n".encode())
        # What ``_watch_heartbeats`` does when the child's record is found in Redis.
        record.seen = True
        self._boot_failures.pop(slot, None)
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # exited, not yet reaped
        return child.pid


def test_a_child_that_says_it_cannot_boot_counts_though_its_heartbeat_was_seen(
        caplog: pytest.LogCaptureFixture) -> None:
    """The parent looks for first heartbeats every tick, and a boot that fails late (after
    the first beat) leaves one there for a moment: the child's own word, its ``boot-error``
    and exit 78, says it could not boot. Taken for a crash, the slot was respawned for ever
    at the backoff's cap, the swarm never stopped and never said why."""
    clock = Clock()
    supervisor = FailingLate(wurk.Config(timeout=10),
                             SwarmSettings(count=1, tick=0.01, backoff_base=1, backoff_max=2),
                             clock=clock)
    supervisor.sent, supervisor.failed = [], []
    caplog.set_level(logging.INFO, logger="wurk")
    try:
        supervisor._respawn(0)
        for _ in range(3):
            supervisor._reap()
            clock.now += 2
            supervisor._respawn_due()
        assert len(supervisor.failed) == 3 and supervisor.children == {}
        assert supervisor.error == (
            "a swarm child cannot boot: slot 0 failed 3 times in a row while booting; last "
            "error: RuntimeError: boot failed late")
        assert "exited with status 78 while booting (3 of 3): RuntimeError: boot failed late" \
            in caplog.text
    finally:
        supervisor.close()
        for child in supervisor.failed:
            child.wait()
