from __future__ import annotations

import asyncio
import re
import sys
from typing import Any

import pytest

import wurk
from wurk import asyncjobs
from wurk.config import Capsule, Config, parse_queue
from wurk.configfile import settings_from_mapping
from wurk.errors import ConfigError


def test_parse_queue() -> None:
    assert parse_queue("critical,3") == ("critical", 3)
    assert parse_queue("default") == ("default", 0)
    with pytest.raises(ConfigError, match="weight 'x' is not a whole number"):
        parse_queue("a,x")
    with pytest.raises(ConfigError, match="reserves"):
        parse_queue("a|b")
    with pytest.raises(ConfigError, match="empty"):
        parse_queue(",3")


def test_capsule_modes() -> None:
    assert Capsule(queues=["a", "b"]).mode == "strict"
    assert Capsule(queues=["a,1", "b,1"]).mode == "random"
    assert Capsule(queues=["a,3", "b,1"]).mode == "weighted"
    assert Capsule(queues=["a", "b", "a"]).queue_names == ["a", "b"]
    with pytest.raises(ConfigError, match="concurrency"):
        Capsule(concurrency=0)


def test_unknown_setting_is_named() -> None:
    with pytest.raises(ConfigError, match="unknown setting 'concurrencyy'"):
        Config.from_mapping({"concurrencyy": 3})


@pytest.mark.parametrize("mode", ["raise", "warn", "off"])
def test_sidekiqs_strict_args_setting_says_what_wurk_does(mode: str) -> None:
    # Sidekiq spells the setting strict_args; wurk has one mode, always refusing
    # arguments that are not JSON-native. The error said only "unknown setting", leaving a
    # Sidekiq 6.4 user to guess whether their arguments would now be stringified.
    with pytest.raises(ConfigError, match=r"unknown setting 'strict_args'; wurk always "
                       r"refuses arguments that are not JSON-native at push"):
        wurk.configure(strict_args=mode)
    with pytest.raises(ConfigError, match="no 'warn' or 'off' mode"):
        settings_from_mapping({"strict_args": mode})


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"timestamp_format": "iso"}, "timestamp_format"),
        ({"concurrency": 0}, "concurrency"),
        ({"timeout": -1}, "timeout"),
        ({"fetch": "magic"}, "fetch must be one of"),
        ({"event_loop": "trio"}, "event_loop must be one of 'auto', 'uvloop', 'asyncio'"),
        ({"queues": "default"}, "queues must be a list"),
    ],
)
def test_bad_settings_are_refused(settings: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Config.from_mapping(settings)


def test_uvloop_asked_for_by_name_where_it_is_not_installed_is_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``None`` in ``sys.modules`` is how Python spells a module that cannot be imported:
    what a machine without uvloop (Windows, PyPy) sees. "auto" falls back to asyncio there."""
    monkeypatch.setitem(sys.modules, "uvloop", None)
    monkeypatch.setattr(asyncjobs, "uvloop", None)
    with pytest.raises(ConfigError, match=r"event_loop is 'uvloop' but uvloop is not "
                                          r"installed \(pip install uvloop"):
        Config.from_mapping({"event_loop": "uvloop"})
    Config.from_mapping({"event_loop": "auto"})
    assert asyncjobs.loop_factory("auto") == ("asyncio", asyncio.new_event_loop)
    assert asyncjobs.EventLoop(kind="auto").kind == "asyncio"
    with pytest.raises(ConfigError, match="uvloop is not installed"):  # a Config not checked
        asyncjobs.EventLoop(kind="uvloop")


def test_the_event_loop_setting_picks_the_loop() -> None:
    with pytest.raises(ConfigError, match="event_loop must be one of"):
        asyncjobs.loop_factory("trio")
    for kind, name in (("auto", "uvloop"), ("uvloop", "uvloop"), ("asyncio", "asyncio")):
        made, new_loop = asyncjobs.loop_factory(kind)
        loop = new_loop()
        try:
            assert made == name and type(loop).__module__.split(".")[0] == name
        finally:
            loop.close()


def test_a_worker_needs_fetches_shorter_than_the_socket_timeout() -> None:
    config = Config.from_mapping({"fetch_timeout": 5, "socket_timeout": 3})  # fine for a web
    with pytest.raises(ConfigError, match=r"fetch_timeout \(5 s\) must be shorter than "
                                          r"socket_timeout \(3 s\)"):
        config.check_worker()
    Config.from_mapping({"fetch_timeout": 1, "socket_timeout": 3}).check_worker()


def test_environment_is_read_when_built(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_URL", "redis://example:1/2")
    monkeypatch.setenv("WURK_TIMESTAMP_FORMAT", "float")
    monkeypatch.setenv("WURK_HOME", "/tmp/wurk-home")
    monkeypatch.setenv("WURK_LEADER", "false")
    cfg = Config(redis_url="redis://explicit:1")
    assert cfg.redis_url == "redis://example:1/2"  # REDIS_URL comes first: set per process
    assert cfg.timestamp_format == "float"
    assert cfg.home == "/tmp/wurk-home"
    assert cfg.leader is False


def test_redis_provider_names_the_variable_holding_the_url(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Sidekiq's ``REDIS_PROVIDER`` (Heroku's add-ons: ``REDIS_PROVIDER=REDISCLOUD_URL``):
    the URL in the variable it names wins over ``REDIS_URL``, as there; it was ignored, so
    a deploy that relied on it ran on the embedded server, a Redis no other host reads."""
    monkeypatch.setenv("REDIS_URL", "redis://fallback:1/0")
    monkeypatch.setenv("REDIS_PROVIDER", "REDISCLOUD_URL")
    monkeypatch.setenv("REDISCLOUD_URL", "redis://cloud:2/3")
    assert Config(redis_url="redis://explicit:1").redis_url == "redis://cloud:2/3"
    monkeypatch.delenv("REDISCLOUD_URL")  # named but unset: REDIS_URL, as Sidekiq reads it
    assert Config().redis_url == "redis://fallback:1/0"
    monkeypatch.delenv("REDIS_URL")  # neither: a typo in the name, not "use no Redis"
    with pytest.raises(ConfigError, match="REDIS_PROVIDER names REDISCLOUD_URL, which is not "
                                          "set"):
        Config()
    monkeypatch.setenv("REDIS_PROVIDER", "redis://:secret@cloud:2/3")  # a URL, not a name
    with pytest.raises(ConfigError, match="name of the variable") as refused:
        Config()
    assert "secret" not in str(refused.value)


def test_every_default_is_the_one_configuration_md_states(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """configuration.md's table of settings, default by default; ``WURK_CONCURRENCY`` and
    ``SIDEKIQ_LEADER`` are read when a ``Config`` is built."""
    for name in ("REDIS_URL", "REDIS_PROVIDER", "WURK_TIMESTAMP_FORMAT", "WURK_HOME",
                 "WURK_LEADER", "SIDEKIQ_LEADER", "WURK_CONCURRENCY"):
        monkeypatch.delenv(name, raising=False)
    day = 86400
    cfg = Config()
    stated = {
        "push_replicas": 0, "push_replica_timeout": 1.0, "shards": {}, "shard_router": None,
        "home": ".wurk", "start_embedded": True, "key_prefix": "", "socket_timeout": 3.0,
        "timestamp_format": "ms", "client": "default", "transaction": None,
        "outbox_batch_size": 100, "outbox_poll_interval": 1.0, "outbox_claim_timeout": 60.0,
        "reliable_push": "off", "reliable_push_size": 1000, "reliable_push_dir": None,
        "bulk_batch_size": 1000, "scheduled_bulk_batch_size": 100, "concurrency": 5,
        "capsules": [], "timeout": 25, "shutdown_grace": 3, "job_timeout": None,
        "control_interval": 1.0, "fetch": "reliable", "fetch_timeout": 1.0, "prefetch": 8,
        "partitions": {}, "partition_rates": {}, "cpu_affinity": "auto",
        "async_concurrency": 100, "event_loop": "auto", "loop_lag_warning": 0.1,
        "gc_threshold": 10000, "max_retries": 25, "dead_max_jobs": 10000,
        "dead_timeout": 180 * day, "average_scheduled_poll_interval": 5,
        "heartbeat_interval": 10, "heartbeat_ttl": 60, "log_format": "pretty",
        "log_level": "INFO", "log_slow_jobs_after": 10, "limiter_reschedule": 20,
        "limiter_errors": [], "limiter_backoff": None, "web_allowed_hosts": [],
        "leader": True, "leader_renew_interval": 15, "leader_check_interval": 60,
        "periodic_catch_up": 300, "periodic_poll_interval": 5,
        "periodic_seconds_field": False, "metrics": True, "metrics_compat_v7": False,
        "history_interval": 30, "retain_history": day, "health_port": None,
        "health_host": "127.0.0.1", "metrics_port": None, "metrics_host": "127.0.0.1",
        "statsd": None, "statsd_prefix": "wurk", "statsd_tags": [],
        "statsd_datadog_extensions": True, "super_fetch_orphan_check": 3600,
        "max_iteration_runtime": None, "redis_idle_timeout": None,
        "web_profiler_upload": True,
        "web_profiler_store_url": "https://api.profiler.firefox.com/compressed-store",
        "web_profiler_view_url": "https://profiler.firefox.com/public/{token}/",
        "web_profiler_timeout": 30,
    }
    assert {name: getattr(cfg, name) for name in stated} == stated
    assert cfg.all_capsules()[0].queue_names == ["default"]
    monkeypatch.setenv("WURK_CONCURRENCY", "7")
    monkeypatch.setenv("SIDEKIQ_LEADER", "false")
    cfg = Config()
    assert cfg.concurrency == 7 and cfg.leader is False


@pytest.mark.parametrize("value", ["0", "-3", "x", "0x10", "²"])
def test_a_bad_wurk_concurrency_is_named(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    """``WURK_CONCURRENCY=0`` was taken as unset: the worker ran 5 threads, silently."""
    monkeypatch.setenv("WURK_CONCURRENCY", value)
    with pytest.raises(ConfigError, match=f"WURK_CONCURRENCY={value!r}"):
        Config()


@pytest.mark.parametrize("value", [1_001, 10**12, True])
def test_a_capsule_s_threads_are_bounded(value: int) -> None:
    """``concurrency: 1000000000000`` hung the worker at full CPU filling its pool, deaf
    to TERM: a capsule's threads are refused past ``MAX_CONCURRENCY`` (and a bool is no
    count)."""
    with pytest.raises(ConfigError, match=r"concurrency must be a (positive )?whole number"):
        Config(concurrency=value).all_capsules()
    with pytest.raises(ConfigError, match=r"capsule 'big': concurrency must be"):
        Config().capsule("big", queues=["q"], concurrency=value)
    assert Config(concurrency=1_000).all_capsules()[0].concurrency == 1_000


def test_bad_environment_value_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WURK_TIMESTAMP_FORMAT", "seconds")
    with pytest.raises(ConfigError, match="WURK_TIMESTAMP_FORMAT"):
        Config()


def test_freeze_makes_it_read_only() -> None:
    cfg = Config()
    cfg.freeze()
    with pytest.raises(ConfigError, match="frozen"):
        cfg.concurrency = 3
    with pytest.raises(RuntimeError, match="frozen"):
        cfg.server_middleware.add(object)


@pytest.mark.parametrize(("queues", "message"), [
    ([("a", 1_000_000)], "the weight must be from 0"),
    ([("a", -1)], "the weight must be from 0"),
    ([("a", "x")], "weight"),
    ([("a", True)], "weight"),
    ([("a b", 1)], "has a space in it"),
    ([(3, 1)], "queue"),
    ([("a",)], "queue"),
])
def test_queues_given_as_pairs_are_checked_as_strings_are(queues: list[Any],
                                                          message: str) -> None:
    """Strings ("a,3") had their weight and name checked; pairs (("a", 3)) skipped the
    weight's range and the name's spaces, or failed with a bare ValueError or IndexError."""
    with pytest.raises(ConfigError, match=message):
        Capsule(queues=queues)
    assert Capsule(queues=[("a", 3), "b,2", ["c", 0]]).queues == [("a", 3), ("b", 2), ("c", 0)]


def test_capsules_and_lifecycle() -> None:
    cfg = Config(queues=["critical,2", "default,1"], concurrency=4)
    cfg.capsule("single", queues=["unsafe"], concurrency=1)
    names = [(c.name, c.concurrency, c.queue_names) for c in cfg.all_capsules()]
    assert names == [("default", 4, ["critical", "default"]), ("single", 1, ["unsafe"])]
    with pytest.raises(ConfigError, match="already exists"):
        cfg.capsule("single", queues=["x"], concurrency=1)
    calls: list[str] = []
    cfg.on("startup", lambda: calls.append("s"))
    assert len(cfg.lifecycle["startup"]) == 1
    with pytest.raises(ConfigError, match="unknown lifecycle event"):
        cfg.on("boot", lambda: None)


def test_configure_replaces_the_process_default() -> None:
    first = wurk.default_config()
    assert wurk.default_config() is first
    second = wurk.configure(concurrency=7)
    assert wurk.default_config() is second and second.concurrency == 7


def test_importing_wurk_has_no_side_effects() -> None:
    import subprocess
    import sys

    code = (
        "import threading, logging, wurk, wurk.config as c;"
        "assert c._default is None, 'config built at import';"
        "assert threading.active_count() == 1, 'thread started at import';"
        "assert not logging.getLogger('wurk').handlers"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_middleware_given_as_lists() -> None:
    def timing(job: object, payload: dict[str, object], queue: str, call_next: Any) -> object:
        return call_next()

    class Stamp:
        def __call__(self, job: object, payload: dict[str, object], queue: str,
                     call_next: Any) -> object:
            return call_next()

    cfg = Config(redis_url="redis://127.0.0.1:1/0", server_middleware=[timing, Stamp],
                 client_middleware=(Stamp,))
    cfg.freeze()
    # Every configuration carries wurk's own links too (batches, limits): instances of
    # wurk's classes, set aside here.
    def given(chain: Any) -> list[Any]:
        return [link for link in chain if not type(link).__module__.startswith("wurk.")]

    assert given(cfg.server_middleware) == [timing, Stamp]
    assert given(cfg.client_middleware) == [Stamp]
    seen: list[str] = []
    assert cfg.server_middleware.invoke(None, {}, "q", lambda: seen.append("ran")) is None
    assert seen == ["ran"]


@pytest.mark.parametrize(("value", "text"), [
    (["pkg.mod:Timing"], "server_middleware[0] is 'pkg.mod:Timing', which is not middleware"),
    ([len, 5], "server_middleware[1] is 5"),
    ("Timing", "must be a list of middleware"),
])
def test_middleware_that_is_not_is_refused_at_once(value: Any, text: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(text)):
        wurk.configure(server_middleware=value)


@pytest.mark.parametrize("value", ["fasle", "maybe", "2"])
def test_a_wurk_leader_that_is_neither_true_nor_false_is_named(
        monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    """``WURK_LEADER=fasle`` was read as true: the process a deploy meant to keep out of
    elections ran the periodic jobs. A value that is neither is named instead."""
    monkeypatch.setenv("WURK_LEADER", value)
    with pytest.raises(ConfigError, match=f"WURK_LEADER={value!r}"):
        Config()
    monkeypatch.delenv("WURK_LEADER")
    monkeypatch.setenv("SIDEKIQ_LEADER", value)
    with pytest.raises(ConfigError, match=f"SIDEKIQ_LEADER={value!r}"):
        Config()


@pytest.mark.parametrize(("value", "leader"), [("false", False), ("No", False), ("0", False),
                                               ("off", False), ("true", True), ("1", True),
                                               ("YES", True), (" on ", True)])
def test_wurk_leader_reads_the_usual_spellings(monkeypatch: pytest.MonkeyPatch, value: str,
                                               leader: bool) -> None:
    monkeypatch.setenv("WURK_LEADER", value)
    assert Config().leader is leader


def test_capsule_names_are_unique_and_not_default() -> None:
    """The default capsule is the top level's (``queues``, ``concurrency``): a capsule of
    the same name, or two of one name, shared one pool and one entry of the process record."""
    with pytest.raises(ConfigError, match=r"capsule 'default'.*top-level concurrency and queues"):
        Config(capsules=[Capsule(name="default", queues=["q"])])
    with pytest.raises(ConfigError, match="two capsules are named 'x'"):
        Config(capsules=[Capsule(name="x", queues=["a"]), Capsule(name="x", queues=["b"])])
    assert [c.name for c in Config(capsules=[Capsule(name="x")]).all_capsules()] == \
        ["default", "x"]


@pytest.mark.parametrize("url", [
    "redis://:Zm9vS3KRIT/cXV4T0KN@redis.example.com:6379/0",  # a base64 password's '/'
    "redis://default:Zm9vS3KRIT/cXV4T0KN@redis.example.com:6379/0",
    "redis://:1234/cXV4T0KN@redis.example.com:6379/0",  # its port would be "1234"
    "redis://:Zm9vS3KRIT?cXV4T0KN@redis.example.com:6379/0",
    "redis://:Zm9vS3KRIT?cXV4T0KN==@redis.example.com:6379/0",
    "redis://:1234#cXV4T0KN@redis.example.com:6379/0",
    "rediss://:Zm9vS3KRIT#cXV4T0KN@redis.example.com:6380/0",
    "redis+sentinel://:Zm9vS3KRIT/cXV4T0KN@s1,s2/mymaster",
    "redis+sentinel://:Zm9vS3KRIT/cXV4T0KN@s1,s2/mymaster/0",
    "redis+cluster://:Zm9vS3KRIT/cXV4T0KN@n1,n2",
    "redis+cluster://:Zm9vS3KRIT?cXV4T0KN@n1,n2",
])
def test_a_password_that_ends_the_hosts_early_is_refused_without_showing_it(
        url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A '/', '?' or '#' left as it is in a password ends the URL's hosts there: the error
    says to percent-encode it and shows no part of the password; none is taken as a port
    and connected to."""
    monkeypatch.delenv("REDIS_URL", raising=False)
    with pytest.raises(ConfigError, match="percent-encode it") as caught:
        Config(redis_url=url)
    for part in ("Zm9v", "S3KRIT", "cXV4", "T0KN", "1234"):
        assert part not in str(caught.value)
    with pytest.raises(ConfigError, match="percent-encode it"):
        Config(shards={"eu": url})


@pytest.mark.parametrize("url", [
    "redis://redis.example.com:6379/0?password=p@ss",
    "redis://:p%2Fss@redis.example.com:6379/0",
    "unix:///run/redis/redis-server@main.sock?db=1",
    "redis+sentinel://s1/mymaster?sentinel_password=p@ss",
    "redis+sentinel://:p?ss@s1/mymaster",
    "redis+cluster://:p%3Fss@n1,n2",
])
def test_an_at_sign_where_a_url_may_hold_one_is_taken(url: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REDIS_URL", raising=False)
    assert Config(redis_url=url).redis_url == url


@pytest.mark.parametrize(("given", "kept"), [
    (("127.0.0.1", 8125), "127.0.0.1:8125"),
    (["statsd.internal", 9125], "statsd.internal:9125"),  # as YAML gives a pair
    (("::1", 8125), "[::1]:8125"),
    ("127.0.0.1:8125", "127.0.0.1:8125"),
])
def test_statsd_takes_a_host_and_port_pair(given: Any, kept: str) -> None:
    """``wurk.configure(statsd=("127.0.0.1", 8125), ...)``: a host and port pair."""
    assert Config(statsd=given).statsd == kept


@pytest.mark.parametrize("given", [("127.0.0.1",), ("127.0.0.1", "8125x"), ("", 8125),
                                   ("127.0.0.1", 0), ("127.0.0.1", True), (1, 8125)])
def test_a_statsd_pair_that_is_no_host_and_port_is_named(given: Any) -> None:
    with pytest.raises(ConfigError, match="statsd must be"):
        Config(statsd=given)


@pytest.mark.parametrize(("cwd", "tag"), [
    ("/srv/shop", "shop"),
    # Capistrano: /srv/<app>/releases/<timestamp>; the tag is the app, not the timestamp
    ("/srv/shop/releases/20240105120301", "shop"),
    ("/srv/shop/releases/0", "0"),               # not a release (Ruby's "0".to_i is 0)
    ("/srv/shop/builds/20240105120301", "20240105120301"),   # not under releases/
    ("/srv/shop/releases/v2", "v2"),
    ("/20240105120301", "20240105120301"),
])
def test_the_default_tag_is_the_app_directory_or_a_capistrano_releases_app(
        cwd: str, tag: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``tag`` defaults to the app directory's name, and for
    Capistrano-style release directories to the app's name (Sidekiq's ``default_tag``):
    every deploy's processes were tagged with their release's timestamp."""
    monkeypatch.setattr("os.getcwd", lambda: cwd)
    assert Config().tag == tag


@pytest.mark.parametrize(("given", "kept"), [(True, "memory"), (False, "off"),
                                             ("disk", "disk"), ("off", "off")])
def test_reliable_push_takes_a_switch(given: Any, kept: str) -> None:
    """``reliable_push=True``, as a Sidekiq Pro user turns it on, is the in-memory buffer
    (Sidekiq Pro's); False is off. Both were refused: only the mode names were taken."""
    assert wurk.configure(reliable_push=given).reliable_push == kept
    assert Config(reliable_push=given).reliable_push == kept


def test_reliable_push_off_in_a_yaml_file_is_off(tmp_path: Any) -> None:
    """YAML reads ``off`` as false: the documented ``reliable_push: off`` was refused."""
    from wurk.configfile import load_file

    path = tmp_path / "wurk.yml"
    path.write_text("reliable_push: off\n")
    assert Config.from_mapping(load_file(path)).reliable_push == "off"
    path.write_text("reliable_push: true\nreliable_push_buffer: 50\n")
    config = Config.from_mapping(load_file(path))
    assert (config.reliable_push, config.reliable_push_size) == ("memory", 50)


def test_reliable_push_buffer_is_the_buffers_size() -> None:
    """``reliable_push_buffer`` (the size's name beside ``reliable_push=True``) was an
    unknown setting; it is ``reliable_push_size``, and an error names that."""
    config = wurk.configure(reliable_push=True, reliable_push_buffer=250)
    assert config.reliable_push_size == 250
    with pytest.raises(ConfigError, match=r"reliable_push_size must be a positive whole"):
        wurk.configure(reliable_push_buffer=0)
    with pytest.raises(ConfigError, match=r"reliable_push_buffer is another name for "
                                          r"reliable_push_size: give one of them"):
        wurk.configure(reliable_push_buffer=10, reliable_push_size=20)


def test_a_reliable_push_that_is_no_mode_is_named() -> None:
    with pytest.raises(ConfigError, match=r"reliable_push must be one of 'off', 'memory', "
                                          r"'disk' \(or True: 'memory', False: 'off'\), "
                                          r"not 'on'"):
        Config(reliable_push="on")  # type: ignore[arg-type]
    config = Config()
    config.reliable_push = True  # set on the object: taken when it is checked, at start
    assert config.freeze().reliable_push == "memory"


@pytest.mark.parametrize(("written", "port"), [
    ("true", 7434), ("yes", 7434), ("false", None), ("off", None), ("", None), ("null", None),
    ("9100", 9100), ("0", 0), ("65535", 65535)])
def test_health_port_in_a_yaml_file_takes_a_switch_or_a_port(tmp_path: Any, written: str,
                                                            port: int | None) -> None:
    """``health_port: true`` is the health check at its default port, as ``--health`` is;
    it was refused (and Python's ``True == 1`` must not make it port 1). ``false`` or no
    value is off; a number is the port."""
    from wurk.cli.worker import build_config
    from wurk.configfile import load_file

    path = tmp_path / "wurk.yml"
    path.write_text(f"health_port: {written}\n")
    assert load_file(path)["health_port"] == port
    assert Config.from_mapping(load_file(path)).health_port == port
    assert build_config({"config_file": str(path)})[0].health_port == port
    # In an environment's section too, over the top level's.
    path.write_text(f"health_port: 9000\nproduction:\n  health_port: {written}\n")
    assert load_file(path, "production")["health_port"] == port


@pytest.mark.parametrize("written", ['"7434"', "on-please", "-1", "65536", "7434.0",
                                     "[7434]", "{port: 7434}"])
def test_a_health_port_in_a_yaml_file_that_is_no_switch_or_port_is_named(
        tmp_path: Any, written: str) -> None:
    from wurk.configfile import load_file

    path = tmp_path / "wurk.yml"
    path.write_text(f"health_port: {written}\n")
    shown = re.escape(repr(yaml_value(written)))
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(path))}: health_port must be "
                                          rf"true \(on, at port 7434\), false \(off\) or a "
                                          rf"TCP port \(0-65535; 0 picks a free one\), "
                                          rf"not {shown}$"):
        load_file(path)


def yaml_value(written: str) -> Any:
    import yaml

    return yaml.safe_load(f"v: {written}")["v"]


def _lock_link(job: Any, payload: dict[str, Any], queue: str, call_next: Any) -> Any:
    return call_next()


def test_a_capsule_holds_a_server_chain_of_its_own() -> None:
    """Sidekiq 7's ``capsule.server_middleware``: given as a list (in order) or a chain,
    added to later through the capsule, looked up by name; the default capsule's is the
    configuration's own, and each capsule's chain is frozen with the configuration."""
    cfg = Config()
    single = cfg.capsule("single", queues=["unsafe"], concurrency=1,
                         server_middleware=[_lock_link])
    assert list(single.server_middleware) == [_lock_link]
    assert cfg.capsule("single") is single  # by name alone: the capsule to edit
    cfg.capsule("single").server_middleware.add(Capsule)
    assert list(single.server_middleware) == [_lock_link, Capsule]
    assert not cfg.all_capsules()[0].server_middleware
    assert list(Capsule(queues=["q"], server_middleware=[_lock_link]).server_middleware) == \
        [_lock_link]
    with pytest.raises(ConfigError, match="no capsule named 'other'"):
        cfg.capsule("other")
    with pytest.raises(ConfigError, match=r"config\.server_middleware"):
        cfg.capsule("default")
    with pytest.raises(ConfigError, match=r"capsule 'bad': server_middleware\[0\] is 3"):
        Capsule(name="bad", queues=["q"], server_middleware=[3])  # type: ignore[list-item]
    with pytest.raises(ConfigError, match=r"capsule 'bad': server_middleware\[1\] is 'x'"):
        cfg.capsule("bad", queues=["q"], concurrency=1, server_middleware=[_lock_link, "x"])
    late = cfg.capsule("late", queues=["later"], concurrency=1)
    late.server_middleware = [_lock_link]  # type: ignore[assignment]  # a list, set later
    cfg.freeze()
    assert list(late.server_middleware) == [_lock_link]  # taken at the freeze
    with pytest.raises(RuntimeError, match="frozen"):
        single.server_middleware.add(_lock_link)
    assert single == Capsule(name="single", queues=["unsafe"], concurrency=1)  # settings only


@pytest.mark.parametrize(("key", "message"), [
    ("server_middleware", "capsule 'single': 'server_middleware' cannot be set in a file"),
    (":server_middleware", "capsule 'single': 'server_middleware' cannot be set in a file"),
    ("client_middleware", "capsule 'single': 'client_middleware' is no capsule's"),
])
def test_a_yaml_capsule_cannot_name_middleware(key: str, message: str) -> None:
    """Middleware is code: a file's capsule naming it is refused by name, not as a typo."""
    with pytest.raises(ConfigError, match=message):
        settings_from_mapping({"capsules": {"single": {"queues": ["unsafe"], "concurrency": 1,
                                                       key: ["Locks::Single"]}}},
                              source="wurk.yml")
