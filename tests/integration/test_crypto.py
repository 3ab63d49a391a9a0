"""Encrypted jobs: the secret never sits in Redis as plain text, the job gets it opened, a
retry keeps one envelope, old key versions still open, and an envelope that cannot be opened
sends its job to the dead set with ``DecryptionError``."""

from __future__ import annotations

import base64
import json
import logging
import os
import subprocess
import sys
from typing import Any

import pytest
import redis

import wurk
from tests.helpers.runner import Drain
from wurk import api, crypto
from wurk.crypto import check_active_key

SECRET = "4111-1111-1111-1111-sekret"
KEYS = {1: os.urandom(32), 2: os.urandom(32)}
SEEN: list[Any] = []


@wurk.job(name="test_crypto.charge", encrypt=True, retry=3)
def charge(order_id: int, card: dict[str, str]) -> None:
    SEEN.append(card)
    if card.get("fail"):
        raise RuntimeError(f"declined for order {order_id}")


@wurk.job(name="test_crypto.lone", encrypt=True)
def lone(card: dict[str, str]) -> None:
    SEEN.append(card)


@wurk.job(name="test_crypto.plain")
def plain(order_id: int, card: dict[str, str]) -> None:
    SEEN.append(card)


@pytest.fixture
def config(redis_server: Any) -> wurk.Config:
    SEEN.clear()
    cfg = wurk.configure(redis_url=redis_server.url)
    crypto.enable(active_version=1, key_for=KEYS.get, config=cfg)
    return cfg


def every_byte(client: redis.Redis) -> bytes:
    """Everything stored in Redis, as raw bytes: each key's DUMP, and its values read back."""
    found = []
    for key in client.scan_iter(count=1000):
        found.append(key)
        found.append(client.dump(key) or b"")
        kind = client.type(key)
        if kind == b"string":
            found.append(client.get(key) or b"")
        elif kind == b"list":
            found += client.lrange(key, 0, -1)
        elif kind == b"zset":
            found += client.zrange(key, 0, -1)
        elif kind == b"hash":
            for field, value in client.hgetall(key).items():
                found += [field, value]
        elif kind == b"set":
            found += list(client.smembers(key))
    return b"\n".join(found)


def leaks(client: redis.Redis, text: str = SECRET) -> bool:
    stored = every_byte(client)
    return text.encode() in stored or base64.b64encode(text.encode()) in stored


def test_the_secret_never_reaches_redis_and_the_job_gets_it(config: wurk.Config,
                                                            redis_server: Any) -> None:
    raw = redis.Redis.from_url(redis_server.url)
    charge.perform_async(7, {"card": SECRET})
    charge.perform_in(3600, 8, {"card": SECRET})
    charge.perform_bulk([[9, {"card": SECRET}], [10, {"card": SECRET}]])
    assert not leaks(raw)
    stored = json.loads(raw.lrange("queue:default", 0, 0)[0])
    assert stored["args"][0] in (9, 10, 7) and crypto.is_envelope(stored["args"][-1])
    assert stored["args"][-1]["v"] == 1 and stored["encrypt"] is True
    assert Drain(config)() == 3
    assert SEEN == [{"card": SECRET}] * 3
    assert not leaks(raw)


def test_a_retry_and_the_dead_set_keep_one_envelope(config: wurk.Config,
                                                    redis_server: Any) -> None:
    raw = redis.Redis.from_url(redis_server.url)
    charge.set(retry=1).perform_async(7, {"card": SECRET, "fail": "yes"})
    Drain(config)()
    assert not leaks(raw)
    entry = json.loads(raw.zrange("retry", 0, -1)[0])
    assert crypto.is_envelope(entry["args"][-1])
    assert crypto.ENVELOPE_MARK not in json.dumps(
        crypto.open_envelope(config, entry["args"][-1], entry["jid"]))  # sealed once
    assert "declined for order 7" in entry["error_message"]
    # due now: the scheduler moves it back and the job fails for good
    raw.zadd("retry", {raw.zrange("retry", 0, -1)[0]: 0})
    wurk.scheduled.Scheduler(config).enqueue_due()
    Drain(config)()
    dead = json.loads(raw.zrange("dead", 0, -1)[0])
    assert crypto.is_envelope(dead["args"][-1]) and not leaks(raw)
    assert SEEN == [{"card": SECRET, "fail": "yes"}] * 2


def test_key_rotation_old_versions_still_open_a_removed_one_kills(
        config: wurk.Config, redis_server: Any) -> None:
    raw = redis.Redis.from_url(redis_server.url, decode_responses=True)
    drain = Drain(config)
    charge.perform_async(1, {"card": "old"})
    crypto.enable(active_version=2, key_for=KEYS.get, config=config)
    charge.perform_async(2, {"card": "new"})
    versions = sorted(json.loads(e)["args"][-1]["v"] for e in raw.lrange("queue:default", 0, -1))
    assert versions == [1, 2]
    assert drain() == 2
    assert sorted(card["card"] for card in SEEN) == ["new", "old"]
    # version 1 retired while a job sealed with it waits
    crypto.enable(active_version=1, key_for=KEYS.get, config=config)
    charge.perform_async(3, {"card": "stranded"})
    died: list[tuple[str, str]] = []
    config.death_handlers.append(lambda job, exc: died.append((job["jid"], type(exc).__name__)))
    crypto.enable(active_version=2, key_for={2: KEYS[2]}.get, config=config)
    SEEN.clear()
    failed_before = drain.counters.failed
    drain()
    assert SEEN == []
    dead = json.loads(raw.zrange("dead", 0, -1)[0])
    assert dead["error_class"] == "wurk.DecryptionError"
    assert "version 1" in dead["error_message"] and dead["jid"] in dead["error_message"]
    assert dead["error_message"].startswith("encryption_error: ")  # as Ruby wurk's
    assert died == [(dead["jid"], "DecryptionError")]
    assert raw.zcard("retry") == 0  # never retried
    assert drain.counters.failed == failed_before + 1  # counted as a failure
    # the key comes back: the dead job, retried, opens and runs
    crypto.enable(active_version=2, key_for=KEYS.get, config=config)
    assert next(iter(api.DeadSet(config))).retry()
    drain()
    assert SEEN == [{"card": "stranded"}]


def envelope(**changes: Any) -> dict[str, Any]:
    nonce, key = os.urandom(12), KEYS[1]
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    sealed = AESGCM(key).encrypt(nonce, json.dumps({"card": SECRET}).encode(), None)
    good = {crypto.ENVELOPE_MARK: True, "v": 1, "iv": base64.b64encode(nonce).decode(),
            "ct": base64.b64encode(sealed[:-16]).decode(),
            "tag": base64.b64encode(sealed[-16:]).decode()}
    good.update(changes)
    return good


def flipped_tag() -> str:
    tag = bytearray(base64.b64decode(envelope()["tag"]))
    tag[0] ^= 1
    return base64.b64encode(bytes(tag)).decode()


@pytest.mark.parametrize(("hostile", "says"), [
    (envelope(ct="%%% not base64 %%%"), "ct is not valid base64"),
    (envelope(iv=base64.b64encode(b"short").decode()), "wrong length"),
    ("tag", "does not authenticate"),
    (envelope(v=9), "version 9"),
    (envelope(v="1"), "not a whole number"),
    ({"card": SECRET}, "not a wurk encryption envelope"),
    ("just text", "not a wurk encryption envelope"),
    (envelope(ct=""), "does not authenticate"),  # truncated
])
def test_a_hostile_envelope_sends_its_job_to_the_dead_set(
        config: wurk.Config, redis_server: Any, hostile: Any, says: str) -> None:
    if hostile == "tag":
        hostile = envelope(tag=flipped_tag())
    raw = redis.Redis.from_url(redis_server.url, decode_responses=True)
    # written as an attacker, a Ruby process or an older version would: straight to the list
    raw.lpush("queue:default", json.dumps({"class": "test_crypto.charge", "args": [1, hostile],
                                           "encrypt": True, "jid": "a" * 24, "queue": "default",
                                           "retry": 3, "created_at": 1_700_000_000_000}))
    plain.perform_async(2, {"card": "fine"})  # the worker goes on
    assert Drain(config)() == 2
    dead = json.loads(raw.zrange("dead", 0, -1)[0])
    assert dead["error_class"] == "wurk.DecryptionError" and says in dead["error_message"]
    assert "a" * 24 in dead["error_message"] and SECRET not in dead["error_message"]
    assert raw.zcard("retry") == 0 and SEEN == [{"card": "fine"}]


def test_encrypt_without_encryption_enabled_is_refused_at_push(redis_server: Any) -> None:
    wurk.configure(redis_url=redis_server.url)
    with pytest.raises(wurk.ConfigError, match=r"encrypt=True but encryption is not enabled.*"
                                                 r"wurk\.crypto\.enable"):
        charge.perform_async(1, {"card": SECRET})
    assert redis.Redis.from_url(redis_server.url).llen("queue:default") == 0


def test_an_encrypted_push_of_fewer_than_two_arguments_is_refused(
        config: wurk.Config, redis_server: Any) -> None:
    """The last argument is the secret and the others stay readable: a job of one argument
    had it sealed whole with no word (nothing readable left to tell the job by), and one of
    none was pushed with nothing sealed. Each push is refused, naming the job, whatever
    path it takes; nothing reaches Redis."""
    raw = redis.Redis.from_url(redis_server.url)
    pushes = [lambda: lone.perform_async({"card": SECRET}),
              lambda: lone.perform_in(60, {"card": SECRET}),
              lambda: lone.perform_bulk([[{"card": SECRET}]]),
              lambda: wurk.push({"class": "test_crypto.charge", "args": [{"card": SECRET}],
                                 "encrypt": True})]
    for push in pushes:
        with pytest.raises(wurk.InvalidArguments,
                           match=r"test_crypto\.\w+ has encrypt=True, which seals its last "
                                 r"argument.*at least two arguments, not 1.*None"):
            push()
    with pytest.raises(wurk.InvalidArguments, match=r"lone has encrypt=True.*not 0"):
        wurk.push({"class": "test_crypto.lone", "args": [], "encrypt": True})
    assert raw.llen("queue:default") == 0 and raw.zcard("schedule") == 0
    assert not leaks(raw)
    # None first, as the message says: sealed and run
    charge.perform_async(None, {"card": SECRET})
    assert not leaks(raw)
    Drain(config)()
    assert SEEN == [{"card": SECRET}]


def test_keys_from_the_environment(redis_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WURK_ENCRYPTION_KEY_3", base64.b64encode(KEYS[2]).decode())
    cfg = wurk.configure(redis_url=redis_server.url, encryption_version=3)
    charge.perform_async(1, {"card": SECRET})
    SEEN.clear()
    Drain(cfg)()
    assert SEEN == [{"card": SECRET}]
    monkeypatch.setenv("WURK_ENCRYPTION_KEY_4", base64.b64encode(b"short").decode())
    with pytest.raises(wurk.ConfigError, match="must be 32 bytes"):
        crypto.enable(active_version=4, config=cfg)


def test_testing_modes_seal_and_open(config: wurk.Config) -> None:
    with wurk.testing.fake():
        charge.perform_async(5, {"card": SECRET})
        assert crypto.is_envelope(charge.jobs[0]["args"][-1])
        charge.drain()
    with wurk.testing.inline():
        charge.perform_async(6, {"card": SECRET})
    assert SEEN == [{"card": SECRET}] * 2


def test_the_dashboard_the_cli_and_the_log_never_show_the_secret(
        config: wurk.Config, redis_server: Any, caplog: pytest.LogCaptureFixture,
        tmp_path: Any) -> None:
    from tests.web.conftest import browse
    from wurk.web import create_app

    caplog.set_level(logging.DEBUG, logger="wurk")
    charge.set(retry=2).perform_async(7, {"card": SECRET, "fail": "yes"})
    Drain(config)()
    with browse(create_app(config)) as web:
        pages = [web.get(path).text for path in ("/retries", "/api/retries", "/queues")]
        entry = web.get("/api/retries").json()
        assert entry
    assert all(SECRET not in page for page in pages)
    assert "[encrypted data]" in pages[0]
    listing = subprocess.run([sys.executable, "-m", "wurk", "retries", "--json"],
                             capture_output=True, text=True, timeout=60,
                             env={**os.environ, "REDIS_URL": redis_server.url})
    assert listing.returncode == 0 and "test_crypto.charge" in listing.stdout
    assert SECRET not in listing.stdout + listing.stderr
    assert SECRET not in caplog.text


def test_a_missing_or_short_key_fails_at_enable_and_leaves_the_configuration_as_it_was(
        config: wurk.Config, redis_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(wurk.ConfigError, match=r"no key for encryption version 9 in key_for"):
        crypto.enable(active_version=9, key_for=KEYS.get, config=config)
    monkeypatch.delenv("WURK_ENCRYPTION_KEY_8", raising=False)
    with pytest.raises(wurk.ConfigError, match=r"version 8 in the environment "
                                                 r"\(WURK_ENCRYPTION_KEY_8\)"):
        crypto.enable(active_version=8, config=config)
    with pytest.raises(wurk.ConfigError, match="must be 32 bytes"):
        crypto.enable(active_version=7, key_for={7: b"short"}.get, config=config)
    # still version 1 with its keys: pushes seal and jobs open as before the refusals
    assert config.encryption_version == 1 and config.encryption_keys == KEYS.get
    charge.perform_async(1, {"card": SECRET})
    raw = redis.Redis.from_url(redis_server.url)
    assert json.loads(raw.lrange("queue:default", 0, 0)[0])["args"][-1]["v"] == 1
    assert Drain(config)() == 1 and SEEN == [{"card": SECRET}]


def test_a_version_no_envelope_can_carry_is_refused_at_enable(
        config: wurk.Config, redis_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """``enable(active_version=True)`` (or 1.0, or "1" with a key in the environment) found
    version 1's key and was taken: every push then sealed an envelope whose version no
    worker accepts, and each job went straight to the dead set. It is refused at enable,
    as the same version is in the settings."""
    monkeypatch.setenv("WURK_ENCRYPTION_KEY_1", base64.b64encode(KEYS[1]).decode())
    for bad in (True, 1.0, -1):
        with pytest.raises(wurk.ConfigError, match=r"encryption_version must be a key version"):
            crypto.enable(active_version=bad, key_for={-1: KEYS[1], **KEYS}.get,
                          config=config)
    with pytest.raises(wurk.ConfigError, match=r"encryption_version must be a key version"):
        crypto.enable(active_version="1", config=config)  # type: ignore[arg-type]
    with pytest.raises(wurk.ConfigError, match=r"encryption_keys must be a function"):
        crypto.enable(active_version=1, key_for=KEYS, config=config)  # type: ignore[arg-type]
    assert config.encryption_version == 1 and config.encryption_keys == KEYS.get
    charge.perform_async(1, {"card": SECRET})
    assert Drain(config)() == 1 and SEEN == [{"card": SECRET}]


def test_a_version_set_on_the_configuration_directly_is_checked_at_the_push(
        config: wurk.Config, redis_server: Any) -> None:
    """``config.encryption_version = 1.0`` (set on the object, not through enable or the
    settings) was checked only when a worker froze the configuration: a process that only
    pushes sealed envelopes of version 1.0, and each job died unopened."""
    raw = redis.Redis.from_url(redis_server.url)
    config.encryption_version = 1.0  # type: ignore[assignment]
    with pytest.raises(wurk.ConfigError, match=r"encryption_version must be a key version"):
        charge.perform_async(1, {"card": SECRET})
    assert raw.llen("queue:default") == 0
    config.encryption_version = 1
    charge.perform_async(1, {"card": SECRET})
    assert raw.llen("queue:default") == 1


def test_every_push_draws_a_fresh_nonce(config: wurk.Config, redis_server: Any) -> None:
    raw = redis.Redis.from_url(redis_server.url)
    for _ in range(3):
        charge.perform_async(1, {"card": SECRET})
    charge.perform_bulk([[1, {"card": SECRET}], [1, {"card": SECRET}]])
    sealed = [json.loads(e)["args"][-1] for e in raw.lrange("queue:default", 0, -1)]
    assert len({e["iv"] for e in sealed}) == len({e["ct"] for e in sealed}) == 5
    assert all(len(base64.b64decode(e["iv"])) == crypto.NONCE_BYTES for e in sealed)


def opens_once(config: wurk.Config, stored: dict[str, Any]) -> Any:
    """The stored job's last argument opened, which must be the plain value: no envelope
    inside an envelope."""
    assert crypto.is_envelope(stored["args"][-1])
    opened = crypto.open_envelope(config, stored["args"][-1], stored["jid"])
    assert crypto.ENVELOPE_MARK not in json.dumps(opened)
    return opened


def test_the_client_mode_scheduler_pushes_the_one_envelope_again(
        config: wurk.Config, redis_server: Any) -> None:
    raw = redis.Redis.from_url(redis_server.url)
    charge.perform_in(3600, 7, {"card": SECRET})
    [member] = raw.zrange("schedule", 0, -1)
    raw.zadd("schedule", {member: 0})  # due now
    config.scheduler = "client"
    assert wurk.scheduled.Scheduler(config).enqueue_due() == 1
    queued = json.loads(raw.lrange("queue:default", 0, 0)[0])
    assert queued["args"][-1] == json.loads(member)["args"][-1]  # the same envelope, unsealed
    assert opens_once(config, queued) == {"card": SECRET} and not leaks(raw)
    assert Drain(config)() == 1 and SEEN == [{"card": SECRET}]


CRYPTO_LIMIT = wurk.limiter.concurrent("crypto-full", 1, wait_timeout=0, reschedule=2,
                                       backoff=lambda limiter, job, exc: 30)


@wurk.job(name="test_crypto.limited", encrypt=True)
def limited(order_id: int, card: dict[str, str]) -> None:
    with CRYPTO_LIMIT.within_limit():
        SEEN.append(card)


def test_a_rate_limiter_reschedules_the_one_envelope(config: wurk.Config,
                                                     redis_server: Any) -> None:
    raw = redis.Redis.from_url(redis_server.url)
    holder = CRYPTO_LIMIT.within_limit()
    holder.__enter__()  # someone else holds the only slot
    try:
        limited.perform_async(7, {"card": SECRET})
        pushed = json.loads(raw.lrange("queue:default", 0, 0)[0])["args"][-1]
        assert Drain(config)() == 1 and SEEN == []
        [member] = raw.zrange("schedule", 0, -1)
        rescheduled = json.loads(member)
        assert rescheduled["overrated"] == 1 and rescheduled["args"][-1] == pushed
        assert opens_once(config, rescheduled) == {"card": SECRET} and not leaks(raw)
    finally:
        holder.__exit__(None, None, None)


def test_a_push_of_a_sealed_job_keeps_its_envelope(config: wurk.Config,
                                                   redis_server: Any) -> None:
    """What a re-push of a stored job does (``wurk enqueue`` of a payload's arguments, a
    retry from the dashboard, another process's client): an envelope is never sealed again."""
    raw = redis.Redis.from_url(redis_server.url)
    charge.perform_async(7, {"card": SECRET})
    first = json.loads(raw.lpop("queue:default"))
    charge.perform_async(*first["args"])
    wurk.push({"class": "test_crypto.charge", "args": first["args"], "encrypt": True})
    again = [json.loads(e) for e in raw.lrange("queue:default", 0, -1)]
    assert [job["args"][-1] for job in again] == [first["args"][-1]] * 2
    assert all(opens_once(config, job) == {"card": SECRET} for job in again)


def no_key_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in os.environ if n.startswith("WURK_ENCRYPTION_KEY_")]:
        monkeypatch.delenv(name)


def test_a_version_set_without_enable_and_no_key_is_a_config_error_at_push_and_start(
        redis_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """``encryption_version`` given to ``wurk.configure`` (or a ``Config``, or the YAML file)
    with no key for it: the push and the worker's check raise ``ConfigError`` naming the
    version and where the key was looked for — never a bare KeyError — and nothing is
    pushed."""
    no_key_in_the_environment(monkeypatch)
    raw = redis.Redis.from_url(redis_server.url)
    cfg = wurk.configure(redis_url=redis_server.url, encryption_version=6)  # the dashboard's too
    in_env = r"no key for encryption version 6 in the environment \(WURK_ENCRYPTION_KEY_6\)"
    with pytest.raises(wurk.ConfigError, match=in_env):
        charge.perform_async(1, {"card": SECRET})
    assert raw.llen("queue:default") == 0
    with pytest.raises(wurk.ConfigError, match=in_env):
        check_active_key(cfg)
    with pytest.raises(wurk.ConfigError, match=in_env):
        wurk.launcher.Launcher(cfg)
    cfg.check_worker()  # what a dashboard checks too: it needs no key
    # a short key in the environment: named with its version and variable
    monkeypatch.setenv("WURK_ENCRYPTION_KEY_6", base64.b64encode(b"short").decode())
    short = (r"key of encryption version 6 in the environment \(WURK_ENCRYPTION_KEY_6\) "
             r"must be 32 bytes")
    with pytest.raises(wurk.ConfigError, match=short):
        check_active_key(cfg)
    with pytest.raises(wurk.ConfigError, match=short):
        charge.perform_async(1, {"card": SECRET})
    # a key_for function that has no key for the active version
    keyed = wurk.configure(redis_url=redis_server.url, encryption_version=6,
                           encryption_keys=KEYS.get)
    with pytest.raises(wurk.ConfigError, match=r"no key for encryption version 6 in key_for"):
        charge.perform_async(1, {"card": SECRET})
    with pytest.raises(wurk.ConfigError, match=r"no key for encryption version 6 in key_for"):
        check_active_key(keyed)
    assert raw.llen("queue:default") == 0
    # once the key is there, the same configuration pushes and runs
    monkeypatch.setenv("WURK_ENCRYPTION_KEY_6", base64.b64encode(KEYS[1]).decode())
    cfg = wurk.configure(redis_url=redis_server.url, encryption_version=6)
    check_active_key(cfg)
    charge.perform_async(1, {"card": SECRET})
    SEEN.clear()
    assert Drain(cfg)() == 1 and SEEN == [{"card": SECRET}]


def test_a_job_of_a_version_with_no_key_still_dies_with_decryption_error(
        config: wurk.Config, redis_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker's side is unchanged: an envelope of a version it has no key for is a
    ``DecryptionError`` (dead set), not the ``ConfigError`` a push gets."""
    no_key_in_the_environment(monkeypatch)
    monkeypatch.setenv("WURK_ENCRYPTION_KEY_5", base64.b64encode(KEYS[2]).decode())
    wurk.configure(redis_url=redis_server.url, encryption_version=5)
    charge.perform_async(3, {"card": SECRET})
    worker = wurk.configure(redis_url=redis_server.url)
    crypto.enable(active_version=1, key_for=KEYS.get, config=worker)
    Drain(worker)()
    raw = redis.Redis.from_url(redis_server.url)
    dead = json.loads(raw.zrange("dead", 0, -1)[0])
    assert dead["error_class"] == "wurk.DecryptionError"
    assert "cannot open encryption version 5: no key" in dead["error_message"]
    assert SEEN == [] and not leaks(raw)


def test_the_dashboard_shows_encrypted_jobs_without_any_key(
        redis_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/encryption.md: "Every process that pushes or runs encrypted jobs needs the keys;
    the dashboard does not." Jobs sealed by a process with the key sit in a queue, the
    scheduled set, the retry set and the dead set; a dashboard whose configuration turns
    encryption on (the shared YAML's ``encryption_version``) but that has no key at all —
    no key_for, no WURK_ENCRYPTION_KEY_* — shows every page with status 200, the last
    argument as ``[encrypted data]``, and never the secret."""
    from tests.web.conftest import browse
    from wurk.web import create_app

    no_key_in_the_environment(monkeypatch)
    pusher = wurk.configure(redis_url=redis_server.url)
    crypto.enable(active_version=1, key_for=KEYS.get, config=pusher)
    charge.set(retry=1).perform_async(11, {"card": SECRET, "fail": "yes"})  # -> retries
    charge.set(retry=0).perform_async(12, {"card": SECRET, "fail": "yes"})  # -> dead
    Drain(pusher)()
    charge.perform_async(13, {"card": SECRET})                               # queued
    charge.perform_in(3600, 14, {"card": SECRET})                            # scheduled
    raw = redis.Redis.from_url(redis_server.url)
    assert [raw.llen("queue:default"), raw.zcard("schedule"), raw.zcard("retry"),
            raw.zcard("dead")] == [1, 1, 1, 1]

    dashboard = wurk.Config.from_mapping({"redis_url": redis_server.url,
                                          "encryption_version": 1})
    assert dashboard.encryption_keys is None
    with pytest.raises(KeyError):  # no key at all, here
        crypto.key(dashboard, 1)
    pages: dict[str, str] = {}
    with browse(create_app(dashboard)) as web:

        def get(path: str) -> str:
            response = web.get(path)
            assert response.status_code == 200, (path, response.status_code)
            pages[path] = response.text
            return response.text

        get("/")
        get("/queues")
        get("/queues/default")
        get("/api/queues/default")
        for kind, order in (("retries", 11), ("scheduled", 14), ("morgue", 12)):
            listing = json.loads(get(f"/api/{kind}"))
            entries = listing["entries"] if isinstance(listing, dict) else listing
            (entry,) = entries
            assert entry["args"][0] == order
            get(f"/{kind}")
            get(f"/{kind}/{entry['key']}")
            get(f"/api/{kind}/{entry['key']}")
    for path in ("/queues/default", "/retries", "/scheduled", "/morgue"):
        assert "[encrypted data]" in pages[path], path
    for kind in ("retries", "scheduled", "morgue"):
        (page,) = [text for path, text in pages.items()
                   if path.startswith(f"/{kind}/")]
        assert "[encrypted data]" in page, kind  # the job's own page too
    assert not [path for path, text in pages.items() if SECRET in text]


def test_without_the_cryptography_package_enable_and_the_worker_check_say_so(
        redis_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """``cryptography`` is an extra: without it, turning encryption on (``enable``, or a
    worker starting with ``encryption_version`` set) is a ``ConfigError`` naming the extra,
    not a failure at the first push or job; ``enable`` leaves the configuration as it was."""
    for name in [n for n in sys.modules if n == "cryptography" or n.startswith("cryptography.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "cryptography", None)  # its import now fails
    crypto._cipher.cache_clear()
    try:
        cfg = wurk.configure(redis_url=redis_server.url)
        with pytest.raises(wurk.ConfigError, match=r"pip install 'wurk\[encryption\]'"):
            crypto.enable(1, KEYS.get, config=cfg)
        assert cfg.encryption_version is None and cfg.encryption_keys is None
        keyed = wurk.configure(redis_url=redis_server.url, encryption_version=1,
                               encryption_keys=KEYS.get)
        with pytest.raises(wurk.ConfigError, match="need the cryptography package"):
            check_active_key(keyed)
        with pytest.raises(wurk.ConfigError, match="need the cryptography package"):
            wurk.launcher.Launcher(keyed)
    finally:
        crypto._cipher.cache_clear()  # keys seen without the package are not kept as ciphers


@wurk.job(name="test_crypto.unique_charge", encrypt=True, unique_for=600)
def unique_charge(order_id: int, card: dict[str, str]) -> None:
    SEEN.append(card)


def test_unique_for_refuses_a_duplicate_encrypted_push(config: wurk.Config,
                                                       redis_server: Any) -> None:
    """Each push seals with a fresh nonce, so a digest of the sealed arguments never
    repeats: the lock is taken from the value instead, through a keyed hash, so the digest
    stored in the payload tells nothing of the secret to whoever lacks the key."""
    raw = redis.Redis.from_url(redis_server.url)
    first = unique_charge.perform_async(1, {"card": SECRET})
    assert first is not None
    assert unique_charge.perform_async(1, {"card": SECRET}) is None
    assert unique_charge.perform_async(1, {"card": "another"}) is not None
    [stored] = [json.loads(e) for e in raw.lrange("queue:default", 0, -1)
                if json.loads(e)["jid"] == first]
    # a re-push of the stored envelope is the same job too
    assert unique_charge.perform_async(*stored["args"]) is None
    plain = wurk.unique.job_digest({"class": "test_crypto.unique_charge", "queue": "default",
                                    "args": [1, {"card": SECRET}]})
    assert stored["unique_digest"] != plain and not leaks(raw)
    assert raw.llen("queue:default") == 2


@pytest.mark.parametrize(("flag", "args", "says"), [
    (1, [1, "sealed"], "its encrypt field is 1, not true or false"),
    ("true", [1, "sealed"], 'its encrypt field is "true", not true or false'),
    ("yes", [1, {"card": SECRET}], 'its encrypt field is "yes"'),
    (True, ["sealed", "sealed"], "argument 1 of 2 is an encryption envelope, but only the last"),
    (False, [1, "sealed"], "argument 2 of 2 is an encryption envelope, but the payload's "
                           "encrypt is not true"),
    (None, ["sealed", 2], "argument 1 of 2 is an encryption envelope"),
])
def test_an_envelope_the_encrypt_field_does_not_account_for_kills_the_job(
        config: wurk.Config, redis_server: Any, flag: Any, args: list[Any], says: str) -> None:
    """A payload from Redis whose ``encrypt`` is no boolean (``1``, ``"true"``), or with an
    envelope where nothing is sealed: the job never runs with an envelope (or a plain value
    taken for an opened one) as its argument; it dies with ``DecryptionError`` naming it."""
    raw = redis.Redis.from_url(redis_server.url, decode_responses=True)
    args = [envelope() if arg == "sealed" else arg for arg in args]
    raw.lpush("queue:default", json.dumps({"class": "test_crypto.plain", "args": args,
                                           "encrypt": flag, "jid": "b" * 24,
                                           "queue": "default", "retry": 3,
                                           "created_at": 1_700_000_000_000}))
    assert Drain(config)() == 1
    dead = json.loads(raw.zrange("dead", 0, -1)[0])
    assert dead["error_class"] == "wurk.DecryptionError" and says in dead["error_message"]
    assert "b" * 24 in dead["error_message"] and SECRET not in dead["error_message"]
    assert SEEN == [] and raw.zcard("retry") == 0


def test_a_push_whose_encrypt_is_no_boolean_is_refused(config: wurk.Config,
                                                       redis_server: Any) -> None:
    """``encrypt: 1`` was pushed in plain text, while the dashboard showed it as
    ``[encrypted data]``."""
    for flag in (1, "true"):
        with pytest.raises(wurk.InvalidPayload, match=r"'encrypt' must be true or false"):
            wurk.push({"class": "test_crypto.charge", "args": [1, {"card": SECRET}],
                       "encrypt": flag})
    assert redis.Redis.from_url(redis_server.url).llen("queue:default") == 0


def test_locked_finds_an_encrypted_jobs_lock_by_its_value(config: wurk.Config) -> None:
    """unique-jobs.md: ``wurk.unique.locked`` digests as a push does; for a job registered
    with ``encrypt=True`` that is the keyed stand-in of its last argument, not the value."""
    first = unique_charge.perform_async(7, {"card": SECRET})
    assert first is not None
    name = "test_crypto.unique_charge"
    assert wurk.unique.locked("default", name, [7, {"card": SECRET}], config=config) == first
    assert wurk.unique.locked("default", name, [7, {"card": "another"}], config=config) is None
    # told the job is not sealed, it digests the plain value: no such lock
    assert wurk.unique.locked("default", name, [7, {"card": SECRET}], config=config,
                              encrypt=False) is None
    # a job registered without encrypt, pushed with set(encrypt=True): told so, it is found
    pushed = plain.set(encrypt=True, unique_for=600).perform_async(8, {"card": SECRET})
    assert pushed is not None
    assert wurk.unique.locked("default", "test_crypto.plain", [8, {"card": SECRET}],
                              config=config) is None
    assert wurk.unique.locked("default", "test_crypto.plain", [8, {"card": SECRET}],
                              config=config, encrypt=True) == pushed


@wurk.job(name="test_crypto.async_charge", encrypt=True, retry=3)
async def async_charge(order_id: int, card: dict[str, str]) -> None:
    SEEN.append(card)


def without_mark() -> dict[str, Any]:
    """An envelope whose mark was lost (a hand-edited or foreign payload): still one."""
    found = envelope()
    del found[crypto.ENVELOPE_MARK]
    return found


@pytest.mark.parametrize("name", ["test_crypto.charge", "test_crypto.async_charge"])
@pytest.mark.parametrize("sealed", [envelope, without_mark])
def test_an_envelope_without_the_encrypt_flag_kills_an_encrypted_job(
        config: wurk.Config, redis_server: Any, name: str,
        sealed: Any) -> None:
    """A payload with no ``encrypt`` key (not even null) of a job declared ``encrypt=True``
    whose last argument is an envelope: the job never runs with the envelope; it dies with
    ``DecryptionError`` naming the jid, the job and the problem, and keeps its envelope."""
    raw = redis.Redis.from_url(redis_server.url, decode_responses=True)
    envelope_arg = sealed()
    raw.lpush("queue:default", json.dumps({"class": name, "args": [7, envelope_arg],
                                           "jid": "c" * 24, "queue": "default", "retry": 3,
                                           "created_at": 1_700_000_000_000}))
    assert Drain(config)() == 1
    assert SEEN == [] and raw.zcard("retry") == 0
    dead = json.loads(raw.zrange("dead", 0, -1)[0])
    assert dead["error_class"] == "wurk.DecryptionError"
    message = dead["error_message"]
    assert "c" * 24 in message and name in message and SECRET not in message
    assert "argument 2 of 2 is an encryption envelope, but the payload has no encrypt" \
        in message
    assert dead["args"] == [7, envelope_arg]  # nothing lost: retry it once it is fixed


def test_a_plain_payload_of_an_encrypted_job_without_the_flag_runs_as_it_is(
        config: wurk.Config, redis_server: Any) -> None:
    """docs/encryption.md: decryption is keyed on the payload's ``encrypt`` flag, as in
    Sidekiq Enterprise. A payload an older client pushed unsealed, no ``encrypt`` key, runs
    with its arguments as they are."""
    raw = redis.Redis.from_url(redis_server.url, decode_responses=True)
    raw.lpush("queue:default", json.dumps({"class": "test_crypto.charge",
                                           "args": [7, {"card": "unsealed"}],
                                           "jid": "d" * 24, "queue": "default", "retry": 3,
                                           "created_at": 1_700_000_000_000}))
    assert Drain(config)() == 1
    assert SEEN == [{"card": "unsealed"}]
    assert raw.zcard("dead") == 0 and raw.zcard("retry") == 0


@wurk.job(name="test_crypto.card")
def card_step() -> dict[str, str]:
    return {"card": SECRET}


@wurk.job(name="test_crypto.order")
def order_step() -> int:
    return 7


def queued(raw: redis.Redis, queue: str = "default") -> list[dict[str, Any]]:
    return [json.loads(entry) for entry in raw.lrange(f"queue:{queue}", 0, -1)]


def test_a_periodic_tick_of_an_encrypted_job_is_sealed_and_runs(redis_server: Any) -> None:
    """The periodic poller pushes a prepared payload (``Client.prepare``), not through the
    push that seals: its tick went to the queue with ``encrypt: true`` and the secret in
    plain text, and the worker buried it (``DecryptionError``: no envelope)."""
    from tests.helpers.wait import wait_until
    from wurk.periodic.leader import Leadership
    from wurk.periodic.poller import PeriodicPoller

    SEEN.clear()
    cfg = wurk.configure(redis_url=redis_server.url, periodic_seconds_field=True,
                         periodic_poll_interval=0.2, leader_renew_interval=5.0,
                         leader_check_interval=0.2)
    crypto.enable(active_version=1, key_for=KEYS.get, config=cfg)
    cfg.periodic.register("* * * * * *", charge, args=[7, {"card": SECRET}])
    raw = redis.Redis.from_url(redis_server.url)
    leader = Leadership(cfg, "host:1:a")
    leader.start()
    poller = PeriodicPoller(cfg, leader)
    try:
        wait_until(leader.is_leader, what="a leader")
        poller.start()
        wait_until(lambda: raw.llen("queue:default") >= 1, what="a tick pushed")
    finally:
        poller.stop(10)
        leader.stop(10)
    (tick, *_) = queued(raw)
    assert tick["encrypt"] is True and crypto.is_envelope(tick["args"][-1])
    assert SECRET not in json.dumps(tick)
    raw.ltrim("queue:default", -1, -1)
    assert Drain(cfg)() == 1
    assert SEEN == [{"card": SECRET}] and raw.zcard("dead") == 0


def test_a_workflow_step_of_an_encrypted_job_is_sealed_and_runs(config: wurk.Config,
                                                                 redis_server: Any) -> None:
    """A workflow's steps are prepared payloads too: an ``encrypt=True`` step was written to
    Redis unsealed (its template and its queue) and died unopened. An earlier step's result
    may fill an earlier argument; the sealed last one cannot take one (it is filled in, in
    Redis, after the seal): refused at the start, naming the step."""
    from wurk.workflow import Workflow, WorkflowError

    raw = redis.Redis.from_url(redis_server.url)
    wf = Workflow()
    wf.step(charge, wf.step(order_step), {"card": SECRET})
    wf.start()
    assert not leaks(raw)
    drain = Drain(config)
    while drain():
        pass
    assert SEEN == [{"card": SECRET}] and raw.zcard("dead") == 0 and not leaks(raw)
    bad = Workflow()
    bad.step(charge, 7, bad.step(card_step))
    with pytest.raises(WorkflowError, match=r"test_crypto\.charge.*encrypt.*last argument"):
        bad.start()


def test_a_raw_push_leaves_the_callers_arguments_as_they_were(config: wurk.Config) -> None:
    """The seal replaced the last item of the caller's own list: after ``wurk.push`` the
    caller's arguments held the envelope, and a second use of them ran with it."""
    args = [7, {"card": SECRET}]
    item = {"class": "test_crypto.charge", "args": args, "encrypt": True}
    wurk.push(item)
    assert args == [7, {"card": SECRET}] and item["args"] is args
    wurk.push_bulk({"class": "test_crypto.charge", "args": [args], "encrypt": True})
    assert args == [7, {"card": SECRET}]
    assert Drain(config)() == 2
    assert SEEN == [{"card": SECRET}] * 2
