"""Checked reading of stored values, for code built on the inspection API: the readers of
``wurk.stored`` (``Invalid``, ``epoch``, ``count``, ``to_json``…) under their documented
name."""

from __future__ import annotations

from ..stored import (
    RAW_LIMIT,
    Invalid,
    backtrace,
    count,
    epoch,
    integer,
    invalid,
    json_object,
    latency,
    split_invalid,
    to_json,
    valid_total,
)

__all__ = ["RAW_LIMIT", "Invalid", "backtrace", "count", "epoch", "integer", "invalid",
           "json_object", "latency", "split_invalid", "to_json", "valid_total"]
