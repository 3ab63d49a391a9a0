"""The enumerators of iterable jobs: each yields ``(item, cursor)`` pairs, and starting at
a cursor starts with the item that cursor names — for lists, id ranges, CSV files, and
database rows keyset-paginated through SQLAlchemy and Django."""

from __future__ import annotations

import io
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from wurk.iteration import (
    csv_batches,
    csv_rows,
    django_batches,
    django_rows,
    ids,
    items,
    sqlalchemy_batches,
    sqlalchemy_rows,
)


def resumed(pairs: list[tuple[Any, Any]], make: Any) -> None:
    """Starting at each pair's cursor gives that pair and all after it."""
    for index, (_, cursor) in enumerate(pairs):
        assert list(make(cursor)) == pairs[index:]


def test_items_from_a_list_and_from_any_iterable() -> None:
    pairs = list(items(["a", "b", "c"]))
    assert pairs == [("a", 0), ("b", 1), ("c", 2)]
    resumed(pairs, lambda cursor: items(["a", "b", "c"], cursor=cursor))
    assert list(items((x for x in "abc"), cursor=1)) == [("b", 1), ("c", 2)]
    assert list(items(["a"], cursor=5)) == []


def test_ids_of_a_range() -> None:
    pairs = list(ids(10, 20, step=3))
    assert pairs == [(10, 10), (13, 13), (16, 16), (19, 19)]
    resumed(pairs, lambda cursor: ids(10, 20, step=3, cursor=cursor))
    assert list(ids(5, 0, step=-2, cursor=3)) == [(3, 3), (1, 1)]


@pytest.mark.parametrize("bad", [-1, "3", 1.5, True, [1]])
def test_a_cursor_of_the_wrong_kind_is_named(bad: Any) -> None:
    with pytest.raises(ValueError, match="cursor"):
        list(items([1, 2], cursor=bad))
    with pytest.raises(ValueError, match="cursor"):
        list(ids(0, 10, step=2, cursor=bad if bad != -1 else 3))


@pytest.mark.parametrize(("start", "stop", "step", "cursor"), [
    (0, 10, 1, -4), (10, 20, 2, 4), (5, 0, -1, 8)])
def test_an_ids_cursor_before_the_range_is_named(start: int, stop: int, step: int,
                                                 cursor: int) -> None:
    """A cursor before ``start`` (written by hand, or a range moved between executions)
    walked ids the job was never given."""
    with pytest.raises(ValueError, match=f"cursor {cursor}"):
        list(ids(start, stop, step=step, cursor=cursor))


def test_csv_rows_and_batches(tmp_path: Path) -> None:
    path = tmp_path / "people.csv"
    path.write_text('name,city\nada,"London, UK"\nalan,"Wilmslow"\n"grace\nhopper",NYC\n'
                    "edsger,Austin\n", encoding="utf-8")
    pairs = list(csv_rows(path))
    assert [row["name"] for row, _ in pairs] == ["ada", "alan", "grace\nhopper", "edsger"]
    assert [cursor for _, cursor in pairs] == [0, 1, 2, 3]
    resumed(pairs, lambda cursor: csv_rows(path, cursor=cursor))
    assert list(csv_rows(io.StringIO("a;b\n1;2\n"), header=False, delimiter=";")) == \
        [(["a", "b"], 0), (["1", "2"], 1)]
    batches = list(csv_batches(path, 3))
    assert [(len(batch), cursor) for batch, cursor in batches] == [(3, 0), (1, 3)]
    assert [len(b) for b, _ in csv_batches(path, 3, cursor=2)] == [2]
    with pytest.raises(ValueError, match="batch size"):
        list(csv_batches(path, 0))


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "orders"
    id: Mapped[int] = mapped_column(primary_key=True)
    customer: Mapped[str]


@pytest.fixture
def session() -> Any:
    engine = sa.create_engine("sqlite://")
    Base.metadata.create_all(engine)
    with Session(engine) as db:
        # Ids with gaps, inserted out of order: keyset paging needs neither.
        db.add_all(Order(id=i, customer=f"c{i % 3}") for i in (9, 2, 30, 4, 17, 5, 11, 8, 23))
        db.commit()
        yield db


def test_sqlalchemy_rows_in_key_order_a_page_at_a_time(session: Session) -> None:
    statement = sa.select(Order)
    pairs = list(sqlalchemy_rows(session, statement, key=Order.id, batch_size=2))
    assert [(order.id, cursor) for order, cursor in pairs] == \
        [(i, i) for i in (2, 4, 5, 8, 9, 11, 17, 23, 30)]
    resumed([(o.id, c) for o, c in pairs], lambda cursor: (
        (o.id, c) for o, c in sqlalchemy_rows(session, statement, key=Order.id, cursor=cursor,
                                              batch_size=2)))
    filtered = sa.select(Order.id, Order.customer).where(Order.customer == "c2")
    assert list(sqlalchemy_rows(session, filtered, key=Order.id, batch_size=4)) == \
        [((i, "c2"), i) for i in (2, 5, 8, 11, 17, 23)]


def test_sqlalchemy_batches_restart_a_batch_from_its_first_row(session: Session) -> None:
    statement = sa.select(Order.id)
    batches = list(sqlalchemy_batches(session, statement, key=Order.id, batch_size=4))
    assert batches == [([2, 4, 5, 8], 2), ([9, 11, 17, 23], 9), ([30], 30)]
    assert list(sqlalchemy_batches(session, statement, key=Order.id, cursor=9,
                                   batch_size=4)) == batches[1:]


def test_sqlalchemy_reads_no_page_past_the_end(session: Session) -> None:
    """A page shorter than the batch size is the last: no query for an empty page."""
    queries: list[str] = []
    sa.event.listen(session.get_bind(), "before_cursor_execute",
                    lambda *args: queries.append(args[2]))
    list(sqlalchemy_rows(session, sa.select(Order), key=Order.id, batch_size=5))
    assert len(queries) == 2


DJANGO = textwrap.dedent('''
    import django
    from django.conf import settings
    settings.configure(INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth"],
                       DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3",
                                              "NAME": ":memory:"}})
    django.setup()
    from django.core.management import call_command
    call_command("migrate", verbosity=0)
    from django.contrib.auth.models import Group
    from wurk.iteration import django_batches, django_rows
    for i in (9, 2, 30, 4, 17, 5, 11):
        Group.objects.create(id=i, name=f"g{i}")
    rows = [(g.name, c) for g, c in django_rows(Group.objects.all(), batch_size=3)]
    assert rows == [(f"g{i}", i) for i in (2, 4, 5, 9, 11, 17, 30)], rows
    again = [(g.name, c) for g, c in django_rows(Group.objects.order_by("-name"), cursor=9,
                                                 batch_size=3)]
    assert again == rows[3:], again
    values = list(django_rows(Group.objects.values("id", "name"), key="id", batch_size=2))
    assert [c for _, c in values] == [2, 4, 5, 9, 11, 17, 30]
    # values() dicts hold the primary key under its name ("id"), not "pk": the default key
    # pages them all the same (it raised KeyError: 'pk')
    plain = list(django_rows(Group.objects.values("id", "name"), cursor=5, batch_size=2))
    assert [c for _, c in plain] == [5, 9, 11, 17, 30], plain
    try:
        list(django_rows(Group.objects.values("name")))
    except ValueError as exc:
        assert "values()" in str(exc) and "pk" in str(exc), exc
    else:
        raise AssertionError("values() without the key paged")
    batches = [([g.id for g in b], c) for b, c in django_batches(Group.objects.all(),
                                                                batch_size=4, cursor=4)]
    assert batches == [([4, 5, 9, 11], 4), ([17, 30], 17)], batches
    print("ok")
''')


def test_django_rows_and_batches_in_a_django_project() -> None:
    done = subprocess.run([sys.executable, "-c", DJANGO], capture_output=True, text=True,
                          timeout=120)
    assert done.stdout.strip() == "ok", done.stderr
    # Exercised here, in the test process, so a typo fails fast too.
    assert callable(django_rows) and callable(django_batches)
