"""Enumerators for iterable jobs: ``(item, cursor)`` pairs over the usual sources.

Each takes the ``cursor`` ``build_enumerator`` was given (None the first time) and starts
with the item that cursor names, so an interrupted job goes on exactly where it stopped:

- ``items(sequence)``: a list's items; the cursor is the index.
- ``ids(start, stop, step=1)``: the integers of a range, as ``range`` does; the cursor is
  the id itself.
- ``csv_rows(path_or_file)`` / ``csv_batches(…, size)``: a CSV file's rows (dicts keyed by
  the header, or lists); the cursor is the row's index among the data rows (a batch's: its
  first row's). Resuming reads past the rows before it.
- ``sqlalchemy_rows(session, select, key=Model.id)`` / ``sqlalchemy_batches``: the rows of a
  SQLAlchemy ``select``, read ``batch_size`` at a time in ``key`` order, keyset-paginated
  (``WHERE key > last ORDER BY key LIMIT n``: no OFFSET, so page 1,000 costs what page 1
  does); the cursor is the row's key (a batch's: its first row's, so an interrupted batch is
  redone from its start).
- ``django_rows(queryset, key="pk")`` / ``django_batches``: the same over a Django queryset.

``key`` must be unique and ordered (a primary key), and its values JSON (int or str): they
are stored as the cursor. A cursor of the wrong kind (the state written by hand, or a job
changed between two executions) is a ``ValueError`` naming it.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Iterable, Iterator, Sequence
from itertools import islice
from typing import Any, TypeVar

__all__ = ["csv_batches", "csv_rows", "django_batches", "django_rows", "ids", "items",
           "sqlalchemy_batches", "sqlalchemy_rows"]

T = TypeVar("T")
BATCH_SIZE = 1000


def _index(cursor: Any, what: str) -> int:
    if cursor is None:
        return 0
    if isinstance(cursor, bool) or not isinstance(cursor, int) or cursor < 0:
        raise ValueError(f"{what}: the cursor {cursor!r} is not an index (an int ≥ 0)")
    return cursor


def _size(size: Any) -> int:
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"batch size {size!r} must be an int ≥ 1")
    return size


def items(sequence: Iterable[T], *, cursor: int | None = None) -> Iterator[tuple[T, int]]:
    """Each item with its index, from the index ``cursor``."""
    start = _index(cursor, "items")
    if isinstance(sequence, Sequence):
        for index in range(start, len(sequence)):
            yield sequence[index], index
        return
    for index, item in enumerate(islice(sequence, start, None), start):
        yield item, index


def ids(start: int, stop: int, *, step: int = 1, cursor: int | None = None
        ) -> Iterator[tuple[int, int]]:
    """``range(start, stop, step)``'s integers, each its own cursor; from ``cursor``."""
    for name, value in (("start", start), ("stop", stop), ("step", step)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"ids: {name} must be an int, not {value!r}")
    if step == 0:
        raise ValueError("ids: step must not be zero")
    first = start
    if cursor is not None:
        # before ``start`` it would walk ids the job was never given; past ``stop`` it walks
        # none (a range that shrank between two executions ends there)
        if isinstance(cursor, bool) or not isinstance(cursor, int) or \
                (cursor - start) % step != 0 or (cursor - start) * step < 0:
            raise ValueError(f"ids: the cursor {cursor!r} is not an id of "
                             f"range({start}, {stop}, {step})")
        first = cursor
    for value in range(first, stop, step):
        yield value, value


def csv_rows(source: str | os.PathLike[str] | io.TextIOBase | Any, *,
             cursor: int | None = None, header: bool = True, encoding: str = "utf-8",
             **dialect: Any) -> Iterator[tuple[Any, int]]:
    """A CSV file's data rows with their index: dicts keyed by the header row when
    ``header`` (the default), lists otherwise. ``source`` is a path or an open text file;
    ``dialect`` goes to the ``csv`` reader (``delimiter=";"``…)."""
    start = _index(cursor, "csv_rows")
    with _opened(source, encoding) as stream:
        reader: Iterator[Any] = csv.DictReader(stream, **dialect) if header \
            else csv.reader(stream, **dialect)
        for index, row in enumerate(islice(reader, start, None), start):
            yield row, index


def csv_batches(source: str | os.PathLike[str] | io.TextIOBase | Any, size: int, *,
                cursor: int | None = None, header: bool = True, encoding: str = "utf-8",
                **dialect: Any) -> Iterator[tuple[list[Any], int]]:
    """``csv_rows`` in lists of ``size`` rows; a batch's cursor is its first row's index."""
    size = _size(size)
    batch: list[Any] = []
    first = _index(cursor, "csv_batches")
    for row, index in csv_rows(source, cursor=cursor, header=header, encoding=encoding,
                               **dialect):
        if not batch:
            first = index
        batch.append(row)
        if len(batch) == size:
            yield batch, first
            batch = []
    if batch:
        yield batch, first


class _opened:
    """A path opened for the walk (closed when it ends), or a file the caller owns."""

    def __init__(self, source: Any, encoding: str) -> None:
        self.source = source
        self.encoding = encoding
        self.owned: Any = None

    def __enter__(self) -> Any:
        if isinstance(self.source, (str, os.PathLike)):
            self.owned = open(self.source, newline="", encoding=self.encoding)
            return self.owned
        return self.source

    def __exit__(self, *exc_info: object) -> None:
        if self.owned is not None:
            self.owned.close()


# -- database rows ------------------------------------------------------------------------------
def _key_cursor(cursor: Any, what: str) -> Any:
    if cursor is None or (isinstance(cursor, (int, str)) and not isinstance(cursor, bool)):
        return cursor
    raise ValueError(f"{what}: the cursor {cursor!r} is not a key value (an int or a str)")


def _sqlalchemy_pages(session: Any, statement: Any, key: Any, cursor: Any, batch_size: int,
                      what: str) -> Iterator[list[tuple[Any, Any]]]:
    """Pages of ``(row, key value)``, keyset-paginated: the key rides along as an added
    column, so any ``select`` (entities, columns, joins) pages the same way."""
    size = _size(batch_size)
    start = _key_cursor(cursor, what)
    single = len(statement.column_descriptions) == 1  # one entity or one column
    last: Any = None
    while True:
        page = statement.add_columns(key).order_by(None).order_by(key).limit(size)
        if last is not None:
            page = page.where(key > last)
        elif start is not None:
            page = page.where(key >= start)
        rows = session.execute(page).all()
        if not rows:
            return
        yield [((row[0] if single else tuple(row[:-1])), row[-1]) for row in rows]
        if len(rows) < size:
            return
        last = rows[-1][-1]


def sqlalchemy_batches(session: Any, statement: Any, *, key: Any, cursor: Any = None,
                       batch_size: int = BATCH_SIZE) -> Iterator[tuple[list[Any], Any]]:
    """The rows of ``statement`` (a SQLAlchemy ``select``) ``batch_size`` at a time, in
    ``key`` order (a unique column, e.g. ``User.id``), each batch with its first key. A row
    is the selected entity or value when one is selected, else the row's tuple."""
    for page in _sqlalchemy_pages(session, statement, key, cursor, batch_size,
                                  "sqlalchemy_batches"):
        yield [row for row, _ in page], page[0][1]


def sqlalchemy_rows(session: Any, statement: Any, *, key: Any, cursor: Any = None,
                    batch_size: int = BATCH_SIZE) -> Iterator[tuple[Any, Any]]:
    """``sqlalchemy_batches`` row by row: each row with its key as the cursor."""
    for page in _sqlalchemy_pages(session, statement, key, cursor, batch_size,
                                  "sqlalchemy_rows"):
        yield from page


def _django_key(item: Any, key: str, queryset: Any) -> Any:
    if isinstance(item, dict):
        if key in item:
            return item[key]
        # values() names the primary key by its field ("id"), never "pk"
        field = queryset.model._meta.pk.attname if key == "pk" else key
        if field in item:
            return item[field]
        raise ValueError(f"django rows: the values() dicts hold no {key!r} "
                         f"({', '.join(map(repr, item))}); include the key field in values()")
    return item.pk if key == "pk" else getattr(item, key)


def django_batches(queryset: Any, *, key: str = "pk", cursor: Any = None,
                   batch_size: int = BATCH_SIZE) -> Iterator[tuple[list[Any], Any]]:
    """A Django queryset ``batch_size`` rows at a time in ``key`` order (a unique field,
    the primary key by default), each batch with its first row's key."""
    size = _size(batch_size)
    start = _key_cursor(cursor, "django_batches")
    last: Any = None
    while True:
        page = queryset.order_by(key)
        if last is not None:
            page = page.filter(**{f"{key}__gt": last})
        elif start is not None:
            page = page.filter(**{f"{key}__gte": start})
        batch = list(page[:size])
        if not batch:
            return
        yield batch, _django_key(batch[0], key, queryset)
        if len(batch) < size:
            return
        last = _django_key(batch[-1], key, queryset)


def django_rows(queryset: Any, *, key: str = "pk", cursor: Any = None,
                batch_size: int = BATCH_SIZE) -> Iterator[tuple[Any, Any]]:
    """``django_batches`` row by row: each row with its key as the cursor."""
    for batch, _ in django_batches(queryset, key=key, cursor=cursor, batch_size=batch_size):
        for row in batch:
            yield row, _django_key(row, key, queryset)
