"""The checks of partitioned queues that need no Redis: partition names, the ``partitions``
setting, and the ``partition`` job option."""

from __future__ import annotations

import pytest

import wurk
from wurk.errors import InvalidPayload
from wurk.partitions import check_partitions, partition_name


@pytest.mark.parametrize("given, stored", [("acct-1", "acct-1"), (42, "42"), ("é" * 100, "é" * 100),
                                           ("a b", "a b")])
def test_a_partition_name_is_stored_as_a_string(given: object, stored: str) -> None:
    assert partition_name(given) == stored


@pytest.mark.parametrize("given", ["", "a:b", "a|b", "a\nb", "x" * 201, "é" * 101, True, 1.5,
                                   None, ["a"], "acct-\ud800"])
def test_a_bad_partition_name_is_refused_naming_it(given: object) -> None:
    with pytest.raises(InvalidPayload, match=r"partition=.* is invalid"):
        partition_name(given)


def test_the_partitions_setting_maps_queues_to_a_limit() -> None:
    assert check_partitions({"imports": 5}) == {"imports": 5}
    for bad, message in (({"imports": 0}, "at least 1"), ({"imports": True}, "at least 1"),
                         ({"imports": "5"}, "at least 1"), (["imports"], "map queue names"),
                         ({"a|b": 1}, "reserves")):
        with pytest.raises(wurk.ConfigError, match=message):
            check_partitions(bad)


def test_partitioned_queues_need_reliable_fetch() -> None:
    with pytest.raises(wurk.ConfigError, match="partitions need fetch='reliable'"):
        wurk.Config(partitions={"imports": 5}, fetch="basic")
    assert wurk.Config.from_mapping({"partitions": {"imports": 5}}).partitions == {"imports": 5}


def test_the_partition_option_is_checked_where_the_job_is_defined() -> None:
    with pytest.raises(wurk.ConfigError, match="option partition='a:b' is invalid"):
        wurk.job(name="parts.bad", partition="a:b")(lambda: None)
    with pytest.raises(wurk.ConfigError, match=r"option partition=1\.5 is invalid"):
        wurk.job(name="parts.bad", partition=1.5)(lambda: None)
