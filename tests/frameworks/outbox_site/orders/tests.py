"""The outbox under Django's test runner, on the database OUTBOX_DB names (PostgreSQL or
SQLite) and a real Redis: tests/frameworks/test_outbox_django.py runs ``manage.py test``."""

import json
import threading
import time
from collections import Counter

from django.db import connection, transaction
from django.test import TransactionTestCase

import wurk
import wurk.testing
from wurk.client.outbox import Relay, relay_for
from wurk.contrib.django.models import OutboxEntry
from wurk.contrib.django.outbox import DjangoOutbox
from wurk.contrib.django.settings import build_config

from .jobs import ship
from .models import Order
from .tasks import add


def redis_client():
    return wurk.default_config().pool("client").client


def queued() -> list[dict]:
    return [json.loads(raw) for raw in reversed(redis_client().lrange("queue:default", 0, -1))]


def wait_for(predicate, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting")
        time.sleep(0.02)
    return value


class Outbox(TransactionTestCase):
    def setUp(self) -> None:
        redis_client().flushdb()

    def test_the_default_client_is_the_outbox(self) -> None:
        self.assertEqual(build_config().client, "outbox")
        self.assertEqual(connection.introspection.table_names().count("wurk_outbox"), 1)

    def test_a_push_in_atomic_is_a_row_of_the_transaction_relayed_after_the_commit(self) -> None:
        with transaction.atomic():
            Order.objects.create(number=1)
            jid = ship.perform_async(1)
            self.assertEqual(list(OutboxEntry.objects.values_list("jid", flat=True)), [jid])
            self.assertEqual(queued(), [])
        # The commit woke this process's relay thread: no worker needed.
        (job,) = wait_for(queued)
        self.assertEqual((job["jid"], job["args"]), (jid, [1]))
        wait_for(lambda: not OutboxEntry.objects.exists())

    def test_a_rollback_leaves_no_row_and_pushes_nothing(self) -> None:
        with self.assertRaises(ValueError), transaction.atomic():
            ship.perform_async(2)
            raise ValueError("rolled back")
        self.assertEqual(wurk.testing.relay_outbox(), 0)
        self.assertFalse(OutboxEntry.objects.exists())
        self.assertEqual(queued(), [])

    def test_a_savepoint_rolled_back_drops_only_its_row(self) -> None:
        with transaction.atomic():
            ship.perform_async(1)
            try:
                with transaction.atomic():
                    ship.perform_async(2)
                    raise ValueError("undo the savepoint")
            except ValueError:
                pass
            ship.perform_async(3)
        wait_for(lambda: len(queued()) == 2)
        self.assertEqual([job["args"] for job in queued()], [[1], [3]])

    def test_redis_down_at_commit_loses_nothing(self) -> None:
        url = wurk.default_config().redis_url
        dead = wurk.configure(build_config(redis_url="redis://127.0.0.1:1/0"))
        try:
            with transaction.atomic():
                jids = [ship.perform_async(n) for n in range(3)]
            # The commit went through; the rows wait while the relay cannot reach Redis.
            wait_for(lambda: relay_for(dead).duty.outage.active)
            self.assertEqual(OutboxEntry.objects.count(), 3)
        finally:
            relay_for(dead).stop()
            wurk.configure(build_config(redis_url=url))
        self.assertEqual(wurk.testing.relay_outbox(), 3)
        self.assertEqual([job["jid"] for job in queued()], jids)
        self.assertFalse(OutboxEntry.objects.exists())

    def test_outside_atomic_and_transactional_false_push_at_once(self) -> None:
        ship.perform_async(1)
        with transaction.atomic():
            ship.set(transactional=False).perform_async(2)
            self.assertEqual([job["args"] for job in queued()], [[1], [2]])
        self.assertFalse(OutboxEntry.objects.exists())

    def test_bulk_and_scheduled_pushes_are_rows_too(self) -> None:
        with transaction.atomic():
            jids = ship.perform_bulk([[n] for n in range(5)])
            ship.perform_in(3600, 9)
            self.assertEqual(OutboxEntry.objects.count(), 6)
        wurk.testing.relay_outbox()
        self.assertEqual(sorted(job["jid"] for job in queued()), sorted(jids))
        self.assertEqual(redis_client().zcard("schedule"), 1)

    def test_fake_mode_keeps_only_committed_pushes(self) -> None:
        with wurk.testing.fake():
            with transaction.atomic():
                ship.perform_async(1)
                self.assertEqual(ship.jobs, [])
            self.assertEqual([job["args"] for job in ship.jobs], [[1]])
            ship.clear()
        self.assertFalse(OutboxEntry.objects.exists())

    def test_a_task_enqueued_in_atomic_goes_through_the_outbox(self) -> None:
        with transaction.atomic():
            result = add.enqueue(2, 3)
            self.assertEqual(list(OutboxEntry.objects.values_list("jid", flat=True)),
                             [result.id])
        wurk.testing.relay_outbox()
        (job,) = queued()
        self.assertEqual((job["jid"], job["args"]), (result.id, [[2, 3], {}]))
        self.assertEqual(str(add.get_result(result.id).status), "READY")

    def test_a_task_enqueued_in_a_rolled_back_atomic_is_never_pushed(self) -> None:
        with self.assertRaises(ValueError), transaction.atomic():
            result = add.enqueue(2, 3)
            raise ValueError("rolled back")
        wurk.testing.relay_outbox()
        self.assertEqual(queued(), [])
        self.assertIsNone(redis_client().get(f"wurk:task-result:{result.id}"))

    def test_four_relays_never_take_one_row_twice(self) -> None:
        """SKIP LOCKED on PostgreSQL, the claim column on SQLite."""
        now = time.time()
        OutboxEntry.objects.bulk_create([OutboxEntry(
            jid=f"{n:024x}", payload=json.dumps({
                "class": "Outbox::Ship", "args": [n], "queue": "default",
                "jid": f"{n:024x}", "retry": True, "created_at": 1}),
            created_at=now) for n in range(300)])
        handed: Counter = Counter()
        lock = threading.Lock()

        class Counting(DjangoOutbox):
            def relay(self, limit, lease, push):
                def counted(rows):
                    with lock:
                        handed.update(row.id for row in rows)
                    time.sleep(0.005)  # hold them: the other relays run meanwhile
                    push(rows)
                return super().relay(limit, lease, counted)

        config = wurk.default_config()
        errors = []

        def work() -> None:
            relay = Relay(config, Counting())
            try:
                while OutboxEntry.objects.exists():
                    relay.run_once()
            except BaseException as exc:
                errors.append(exc)
            finally:
                connection.close()

        threads = [threading.Thread(target=work) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        self.assertEqual(errors, [])
        self.assertEqual(len(handed), 300)
        self.assertEqual(set(handed.values()), {1})
        self.assertEqual(len(queued()), 300)


class LockOnTheTable(TransactionTestCase):
    def test_a_lock_on_the_table_holds_a_relay_no_longer_than_its_lock_timeout(self) -> None:
        """A migration's lock on wurk_outbox held the relay's transaction (and a worker's
        shared timer thread) as long as it lasted; on PostgreSQL the wait is bounded."""
        from django.db import connections

        from wurk.client.outbox import LOCK_TIMEOUT

        if connection.vendor != "postgresql":
            self.skipTest("SQLite bounds the wait with its busy timeout")
        OutboxEntry.objects.create(jid="f" * 24, created_at=time.time(), payload=json.dumps(
            {"class": "Outbox::Ship", "args": [1], "queue": "default", "jid": "f" * 24}))
        relay = Relay(wurk.default_config(), DjangoOutbox())
        outcome = []

        def poll() -> None:
            try:
                outcome.append(relay.poll())
            except BaseException as exc:
                outcome.append(exc)
            finally:
                connection.close()

        migration = connections.create_connection("default")
        try:
            migration.set_autocommit(False)
            with migration.cursor() as cursor:
                cursor.execute("LOCK TABLE wurk_outbox IN ACCESS EXCLUSIVE MODE")
            polling = threading.Thread(target=poll, daemon=True)
            polling.start()
            polling.join(LOCK_TIMEOUT + 20)
            held = polling.is_alive()
        finally:
            migration.rollback()
            migration.close()
        polling.join(30)
        self.assertFalse(held, "the relay waited for the table's lock as long as it was held")
        (failed,) = outcome
        self.assertIn("lock timeout", str(failed))
        self.assertEqual(queued(), [])
        self.assertFalse(relay.poll())  # the lock gone: relayed
        self.assertEqual([job["jid"] for job in queued()], ["f" * 24])
        self.assertFalse(OutboxEntry.objects.exists())


class OnCommit(TransactionTestCase):
    """client="transactional": today's on_commit push, for projects without the table."""

    def setUp(self) -> None:
        redis_client().flushdb()
        wurk.configure(build_config(client="transactional"))
        self.addCleanup(lambda: wurk.configure(build_config()))

    def test_the_push_waits_for_on_commit_and_writes_no_row(self) -> None:
        with transaction.atomic():
            jid = ship.perform_async(1)
            self.assertEqual(queued(), [])
        self.assertEqual([job["jid"] for job in queued()], [jid])
        self.assertFalse(OutboxEntry.objects.exists())

    def test_redis_down_at_commit_is_logged_and_the_job_is_lost(self) -> None:
        """What this mode promises, plainly: nothing is kept when the push fails."""
        wurk.configure(build_config(client="transactional", redis_url="redis://127.0.0.1:1/0"))
        with self.assertLogs("django.db.backends.base", "ERROR"), transaction.atomic():
            ship.perform_async(1)
        self.assertFalse(OutboxEntry.objects.exists())



class WithoutTheTable(TransactionTestCase):
    def test_a_push_in_atomic_raises_at_the_call_and_rolls_back(self) -> None:
        """``migrate`` not run: loud at the call, never a lost job."""
        from django.db import DatabaseError

        with connection.schema_editor() as editor:
            editor.delete_model(OutboxEntry)
        try:
            with self.assertRaises(DatabaseError), transaction.atomic():
                Order.objects.create(number=1)
                ship.perform_async(1)
            self.assertFalse(Order.objects.exists())
        finally:
            with connection.schema_editor() as editor:
                editor.create_model(OutboxEntry)


class TaskRecordAtCommit(TransactionTestCase):
    def test_a_record_redis_could_not_take_at_commit_reads_as_missing_until_it_runs(
            self) -> None:
        from wurk.contrib.django.tasks import TaskResultDoesNotExist

        redis_client().flushdb()
        url = wurk.default_config().redis_url
        dead = wurk.configure(build_config(redis_url="redis://127.0.0.1:1/0"))
        try:
            with self.assertLogs("django.db.backends.base", "ERROR"), transaction.atomic():
                result = add.enqueue(1, 2)
        finally:
            relay_for(dead).stop()
            wurk.configure(build_config(redis_url=url))
        with self.assertRaises(TaskResultDoesNotExist):
            add.get_result(result.id)
        wurk.testing.relay_outbox()  # its row was kept: the task runs once relayed
        self.assertEqual([job["jid"] for job in queued()], [result.id])
