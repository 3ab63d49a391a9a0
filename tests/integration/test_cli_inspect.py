"""The inspection commands through ``wurk.cli.run``: exit codes, messages, tables, JSON."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import redis

import wurk
from tests.helpers.sidekiq import heartbeat, load_sidekiq64
from wurk.cli import run


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = run(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def job(n: int, **extra: Any) -> str:
    return json.dumps({"retry": True, "queue": "default", "class": "HardJob", "args": [n],
                       "jid": f"{n:024x}", "created_at": 1700000000123, **extra},
                      separators=(",", ":"))


@pytest.fixture
def seeded(config: wurk.Config, r: redis.Redis) -> wurk.Config:
    load_sidekiq64(r)
    r.mset({"stat:processed": 1234567, "stat:failed": 89})
    heartbeat(r, "web-1:101:aaaaaaaaaaaa", busy=2, concurrency=10, rss=204800, quiet=True,
              info={"hostname": "web-1", "pid": 101, "tag": "app", "started_at": time.time() - 90,
                    "queues": ["default"], "identity": "web-1:101:aaaaaaaaaaaa"})
    return config


def test_stats_table(seeded: wurk.Config, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "stats")
    assert code == 0
    lines = dict(line.split(None, 1) for line in out.splitlines())
    # web-1 beat just now: its counts since then are not in yet, and the table says so
    # (Sidekiq 6.4's records of the fixture beat days ago: dead, they add nothing).
    assert lines["Processed"].startswith("1,234,567 (as of each running worker's last "
                                         "heartbeat, the oldest ")
    assert lines["Failed"] == "89 (likewise)"
    assert lines["Enqueued"] == "6" and lines["Dead"] == "3" and lines["Busy"] == "2"
    assert lines["Latency"].endswith("(default queue)")


def test_stats_json(seeded: wurk.Config, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "stats", "--json")
    numbers = json.loads(out)
    assert code == 0 and numbers["processed"] == 1234567 and numbers["enqueued"] == 6
    assert {q["name"] for q in numbers["queues"]} == {"critical", "default"}
    assert numbers["default_queue_latency"] > 0


def test_queues_list_and_json(seeded: wurk.Config, r: redis.Redis,
                              capsys: pytest.CaptureFixture[str]) -> None:
    r.sadd("paused", "critical")
    code, out, _ = cli(capsys, "queues")
    header, *rows = out.splitlines()
    assert code == 0 and header.split() == ["QUEUE", "SIZE", "LATENCY", "STATE"]
    assert rows[0].split()[0] == "critical" and rows[0].split()[-1] == "paused"
    assert rows[1].split()[:2] == ["default", "5"]
    code, out, _ = cli(capsys, "queues", "--json")
    assert [(q["name"], q["size"], q["paused"]) for q in json.loads(out)] == [
        ("critical", 1, True), ("default", 5, False)]


def test_no_queues(config: wurk.Config, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(capsys, "queues") == (0, "No queues.\n", "")
    assert cli(capsys, "processes") == (0, "No processes.\n", "")


def test_pause_unpause(config: wurk.Config, r: redis.Redis,
                       capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "queues", "pause", "mail")
    assert code == 0 and "Paused queue 'mail'" in out and r.smembers("paused") == {"mail"}
    code, out, _ = cli(capsys, "queues", "unpause", "mail")
    assert code == 0 and r.smembers("paused") == set()


def test_clear_refuses_without_a_terminal_or_yes(seeded: wurk.Config, r: redis.Redis,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, "queues", "clear", "default")
    assert code == 1 and out == ""
    assert "stdin is not a terminal" in err and "--yes" in err and "Traceback" not in err
    assert r.llen("queue:default") == 5
    code, out, _ = cli(capsys, "queues", "clear", "default", "--yes")
    assert code == 0 and "5 jobs deleted" in out
    assert r.exists("queue:default") == 0 and r.smembers("queues") == {"critical"}


def test_clear_unknown_and_bad_names(config: wurk.Config,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(capsys, "queues", "clear", "nope", "--yes")
    assert code == 1 and "no queue named 'nope'" in err
    code, _, err = cli(capsys, "queues", "pause", "a|b")
    assert code == 2 and "'|'" in err
    code, _, err = cli(capsys, "queues", "clear")
    assert code == 2 and "NAME" in err


def test_retries_and_dead_listings(seeded: wurk.Config, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "retries")
    lines = out.splitlines()
    assert code == 0 and lines[0] == "2 in the retry set"
    assert lines[1].split() == ["NEXT", "TRY", "JID", "JOB", "ARGS", "QUEUE", "RETRIES", "ERROR"]
    assert "ArgumentError: fixture failure 7" in out and "ago" in lines[2]
    code, out, _ = cli(capsys, "dead", "--limit", "1")
    lines = out.splitlines()
    assert code == 0 and lines[0] == "3 in the dead set; 1 shown" and len(lines) == 3
    assert "{not json" in lines[2]  # the newest death is the unparseable entry, shown raw
    code, out, _ = cli(capsys, "dead", "--grep", "fixture death")
    assert code == 0 and "DieJob" in out and "NotDefinedAnywhere" not in out


def test_retries_json(seeded: wurk.Config, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "retries", "--json", "-n", "1")
    document = json.loads(out)
    assert code == 0 and (document["total"], document["shown"]) == (2, 1)
    (entry,) = document["entries"]  # the soonest next try first, as Sidekiq's page lists
    assert entry["jid"] == "19f610970e4822ae8e503f92" and entry["payload"]["retry"] is True
    assert entry["score"] == 1795971244.9607399
    code, _, err = cli(capsys, "retries", "--limit", "0")
    assert code == 2 and "--limit" in err


def test_processes_table_and_json(seeded: wurk.Config, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "processes")
    header, sidekiq, row, footer = out.splitlines()  # sorted by identity: vm:… is the 6.4 one
    assert code == 0 and header.split()[:4] == ["PROCESS", "TAG", "STARTED", "BUSY"]
    assert sidekiq.split()[:2] == ["vm:29146", "fixtures"] and "0/3" in sidekiq
    assert row.split()[0] == "web-1:101" and "2/10" in row and "200.0 MB" in row
    assert row.split()[-1] == "quiet"
    assert footer == "2 processes; 2 of 13 threads busy; 229.8 MB RSS"
    code, out, _ = cli(capsys, "processes", "--json")
    processes = {p["identity"]: p for p in json.loads(out)}
    assert processes["web-1:101:aaaaaaaaaaaa"]["quiet"] is True


def test_retry_from_each_set(config: wurk.Config, r: redis.Redis,
                             capsys: pytest.CaptureFixture[str]) -> None:
    r.zadd("retry", {job(1, retry_count=2): 10.0})
    r.zadd("dead", {job(2, queue="low"): 10.0})
    r.zadd("schedule", {job(3, retry_count=5): time.time() + 3600})
    code, out, _ = cli(capsys, "retry", f"{1:024x}")
    assert code == 0 and "from the retry set to queue 'default'" in out
    code, out, _ = cli(capsys, "retry", f"{2:024x}")
    assert code == 0 and "from the dead set to queue 'low'" in out
    code, out, _ = cli(capsys, "retry", f"{3:024x}")
    assert code == 0 and "scheduled set" in out
    counts = sorted(json.loads(x).get("retry_count") for x in r.lrange("queue:default", 0, -1))
    assert counts == [1, 5]  # a scheduled job is added as it is
    assert r.zcard("retry") + r.zcard("dead") + r.zcard("schedule") == 0
    code, _, err = cli(capsys, "retry", f"{1:024x}")
    assert code == 1 and "no job with jid" in err


def test_retry_of_an_unparseable_entry_is_a_clear_error(config: wurk.Config, r: redis.Redis,
                                                        capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    r.zadd("dead", {'{"jid":"abc","args":[1],"queue":7,"class":"X"}': 1.0})
    code, _, err = cli(capsys, "retry", "abc")
    assert code == 1 and "cannot be pushed to" in err and "Traceback" not in err


def test_kill(config: wurk.Config, r: redis.Redis, capsys: pytest.CaptureFixture[str]) -> None:
    r.zadd("retry", {job(1): 10.0})
    code, _, err = cli(capsys, "kill", f"{1:024x}")
    assert code == 1 and "without confirmation" in err and r.zcard("retry") == 1
    code, out, _ = cli(capsys, "kill", f"{1:024x}", "-y")
    assert code == 0 and "moved from the retry set to the dead set" in out
    assert r.zrange("dead", 0, -1) == [job(1)]
    code, _, err = cli(capsys, "kill", f"{1:024x}", "--yes")
    assert code == 1 and "already in the dead set" in err
    code, _, err = cli(capsys, "kill", "nope", "--yes")
    assert code == 1 and "no job with jid 'nope'" in err


def test_unreachable_redis_is_one_line(monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:1/0")
    for argv in (["stats"], ["queues", "--json"], ["retry", "abc"], ["processes"]):
        code, out, err = cli(capsys, *argv)
        assert code == 1 and out == "" and "Traceback" not in err
        assert err.startswith("Error: ") and "127.0.0.1:1" in err
        assert len(err.strip().splitlines()) == 1


def test_wrong_type_in_redis_reads_as_empty_and_says_which_key(
        config: wurk.Config, r: redis.Redis, capsys: pytest.CaptureFixture[str],
        caplog: pytest.LogCaptureFixture) -> None:
    from wurk.connections import reading

    reading._warned.clear()  # said once per key and process: this test wants to hear it
    r.set("retry", "oops")
    code, _, err = cli(capsys, "retries")
    assert code == 0 and "Traceback" not in err
    assert "'retry' holds a value of another type" in caplog.text


def test_a_key_of_the_wrong_type_a_command_writes_is_one_line_and_exit_1(
        config: wurk.Config, r: redis.Redis, capsys: pytest.CaptureFixture[str]) -> None:
    """inspection.md: "Errors are one line on stderr with exit 1 (…, a key of the wrong
    type)": a key the command writes (one it only reads reads as absent, the test above)."""
    r.set("paused", "oops")
    code, out, err = cli(capsys, "queues", "pause", "default")
    assert (code, out) == (1, "") and err.startswith("Error: WRONGTYPE")
    assert err.count("\n") == 1 and "Traceback" not in err
    r.zadd("retry", {job(1): 10.0})
    r.set("queue:default", "oops")
    code, out, err = cli(capsys, "retry", f"{1:024x}")
    assert (code, out) == (1, "") and err.startswith("Error: WRONGTYPE")
    assert err.count("\n") == 1 and "nothing was moved" in err
    assert r.zrange("retry", 0, -1) == [job(1)]  # still in the retry set, not lost


@pytest.mark.parametrize("url", ["ftp://example.com", "redis://localhost:notaport",
                                 "redis://localhost:99999"])
def test_a_redis_url_that_is_no_redis_url_is_one_line_and_exit_2(
        url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A bad ``REDIS_URL`` or ``--redis-url`` is a bad configuration (exit 2, one line naming
    it), not redis-py's traceback when the first command connects."""
    code, out, err = cli(capsys, "stats", "--redis-url", url)
    assert (code, out) == (2, "") and "Traceback" not in err
    assert "Error: Invalid value for '--redis-url': not a Redis URL" in err
    monkeypatch.setenv("REDIS_URL", url)
    for argv in (["stats"], ["queues"], ["retries"], ["processes"]):
        code, out, err = cli(capsys, *argv)
        assert (code, out) == (2, "") and "Traceback" not in err
        assert err.startswith("Error: redis_url: not a Redis URL") and err.count("\n") == 1


def test_a_bad_setting_in_the_environment_is_exit_2(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """wurk.cli: a bad configuration exits 2 — for the inspection commands as for the
    worker, not 1 as a Redis error."""
    monkeypatch.setenv("WURK_CONCURRENCY", "many")
    code, out, err = cli(capsys, "retries")
    assert (code, out) == (2, "") and err.count("\n") == 1
    assert err.startswith("Error: environment variable WURK_CONCURRENCY='many'")


def test_retry_and_kill_escape_the_stored_class_they_name(
        config: wurk.Config, r: redis.Redis, capsys: pytest.CaptureFixture[str]) -> None:
    """A class name from Redis is untrusted: its terminal escapes (here one that retitles
    the terminal window) are printed escaped, as the listings print them."""
    hostile = "Evil\x1b]0;pwned\x07\x1b[2J"
    r.zadd("retry", {job(1, **{"class": hostile}): 10.0, job(2, **{"class": hostile}): 10.0})
    code, out, err = cli(capsys, "retry", f"{1:024x}")
    assert code == 0 and "\x1b" not in out + err and "\x07" not in out + err
    assert out.startswith("Pushed Evil\\x1b]0;pwned\\x07\\x1b[2J ")
    code, out, err = cli(capsys, "kill", f"{2:024x}", "--yes")
    assert code == 0 and "\x1b" not in out + err and "\x07" not in out + err
    assert out.startswith("Killed Evil\\x1b]0;pwned\\x07\\x1b[2J ")
