"""The shop under Django's test runner, against a real Redis and a real wurk worker.

Run: ``python manage.py test shop`` (REDIS_URL, or wurk's embedded server).
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlencode

from django.contrib.auth.models import User
from django.core.signals import request_finished
from django.db import close_old_connections, connection, transaction
from django.test import TestCase, TransactionTestCase
from django.urls import include, path

import wurk
import wurk.testing
from wurk.contrib.django.urls import dashboard_urls

from .jobs import ship_order
from .models import Order
from .tasks import add, attempt_number, refuse

PROJECT = Path(__file__).resolve().parent.parent

# The dashboard mounted with the live stream on (``ROOT_URLCONF="shop.tests"`` in a test).
urlpatterns = [path("wurk/", include(dashboard_urls(live=True)))]

# What ``look_at_the_connection`` saw as it started: (no connection open, queries logged).
SEEN: list[tuple[bool, int]] = []


@wurk.job
def look_at_the_connection() -> None:
    SEEN.append((connection.connection is None, len(connection.queries_log)))
    connection.ensure_connection()  # the job's own, for the close after it


def flush_redis() -> None:
    wurk.default_config().pool("client").run(lambda r: r.flushdb())


def queued() -> list[dict]:
    config = wurk.default_config()
    raw = config.pool("client").run(lambda r: r.lrange(config.keys.queue("default"), 0, -1))
    return [json.loads(entry) for entry in raw]


def wait_for(predicate, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting")
        time.sleep(0.05)


def use_on_commit(test) -> None:
    """client="transactional" for this test: pushes wait in memory for on_commit (the mode
    for a project without the outbox table), instead of being rows of the transaction."""
    from wurk.contrib.django.settings import build_config

    wurk.configure(build_config(client="transactional"))
    test.addCleanup(lambda: wurk.configure(build_config()))


def refuse_even_orders(test) -> None:
    """A client middleware, for this test only, that refuses even order ids (with
    client="transactional" it runs at the commit)."""
    def refuses_even(job, payload, queue, call_next):
        if payload["args"][0] % 2 == 0:
            raise RuntimeError(f"refused {payload['args'][0]}")
        return call_next()

    chain = wurk.default_config().client_middleware
    chain.add(refuses_even)
    test.addCleanup(chain.remove, refuses_even)


def push_in_a_savepoint_rolled_back(order_id: int) -> None:
    try:
        with transaction.atomic():
            ship_order.perform_async(order_id)
            raise ValueError("undo the savepoint")
    except ValueError:
        pass


class PushInsideAtomic(TransactionTestCase):
    """Real commits (TransactionTestCase): the push is a row of the outbox table, relayed to
    Redis by this process once the transaction commits."""

    def setUp(self) -> None:
        flush_redis()

    def test_a_commit_pushes_one_job_after_the_commit(self) -> None:
        response = self.client.post("/orders", {"item": "book"})
        self.assertEqual(response.status_code, 200)
        body = response.json()
        self.assertEqual(body["queued_inside"], 0)  # nothing while the transaction was open
        (job,) = wait_for(queued)  # relayed after the commit
        self.assertEqual(job["args"], [body["order"]])
        self.assertEqual(job["jid"], body["jid"])

    def test_a_rollback_pushes_nothing(self) -> None:
        response = self.client.post("/orders", {"item": "book", "out_of_stock": "1"})
        self.assertEqual(response.status_code, 409)
        self.assertEqual(queued(), [])
        self.assertFalse(Order.objects.exists())

    def test_transactional_false_pushes_at_once_inside_atomic(self) -> None:
        with transaction.atomic():
            ship_order.set(transactional=False).perform_async(1)
            ship_order.perform_async(2)
            self.assertEqual([job["args"] for job in queued()], [[1]])
        wait_for(lambda: len(queued()) == 2)
        self.assertEqual(sorted(job["args"][0] for job in queued()), [1, 2])

    def test_the_push_is_a_row_of_the_transaction(self) -> None:
        from wurk.contrib.django.models import OutboxEntry

        with transaction.atomic():
            jid = ship_order.perform_async(1)
            self.assertEqual(list(OutboxEntry.objects.values_list("jid", flat=True)), [jid])
        wurk.testing.relay_outbox()  # now, rather than when its thread gets to it
        self.assertEqual([job["jid"] for job in queued()], [jid])

    def test_fake_mode_sees_the_committed_push(self) -> None:
        with wurk.testing.fake():
            self.client.post("/orders", {"item": "pen"})
            self.assertEqual(len(ship_order.jobs), 1)
            ship_order.drain()
            # The job's connection was closed after it, as at the end of a request
            # (CONN_MAX_AGE is 0).
            self.assertIsNone(connection.connection)
        self.assertTrue(Order.objects.get(item="pen").shipped)
        self.assertEqual(queued(), [])

    def test_each_job_runs_between_two_close_old_connections_calls(self) -> None:
        # django.md: "a connection past CONN_MAX_AGE, or broken, is closed before the job and
        # after it; the query log (DEBUG) is reset" (CONN_MAX_AGE is 0 here: each is past it).
        SEEN.clear()
        with wurk.testing.fake():
            look_at_the_connection.perform_async()
            connection.ensure_connection()  # opened before the job, as a request left it
            connection.queries_log.append({"sql": "SELECT 'before the job'", "time": "0"})
            look_at_the_connection.drain()
            self.assertEqual(SEEN, [(True, 0)])  # closed and the log reset before it ran
            self.assertIsNone(connection.connection)  # the job's own, closed after it


class WithARealWorker(TransactionTestCase):
    """``manage.py wurk`` in a subprocess, on the test database."""

    worker: subprocess.Popen

    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        flush_redis()
        cls.probe = Path(tempfile.mkdtemp(prefix="shop-probe-"))
        (cls.probe / "probe_never_imported.py").write_text(
            "from pathlib import Path\n"
            "Path(__file__).with_name('imported').touch()\n"
            "def Job(*args):\n    pass\n")
        env = {**os.environ, "SHOP_DB": str(connection.settings_dict["NAME"]),
               "PYTHONPATH": os.pathsep.join(filter(None, [str(cls.probe),
                                                           os.environ.get("PYTHONPATH")]))}
        cls.worker = subprocess.Popen(
            [sys.executable, "manage.py", "wurk", "--noreload", "-c", "2"],
            cwd=PROJECT, env=env)

    @classmethod
    def tearDownClass(cls) -> None:
        cls.worker.terminate()
        cls.worker.wait(30)
        shutil.rmtree(cls.probe, ignore_errors=True)
        super().tearDownClass()

    def test_a_payloads_class_name_is_never_imported(self) -> None:
        # django.md: "A worker only runs jobs of modules it loaded: a payload's class name
        # is never imported" (the module is on the worker's path; importing it leaves a file).
        jid = wurk.push({"class": "probe_never_imported.Job", "args": [], "retry": 1})
        config = wurk.default_config()
        retried = wait_for(lambda: config.pool("client").run(
            lambda r: r.zrange(config.keys.retry, 0, -1)))
        [entry] = [json.loads(raw) for raw in retried]
        self.assertEqual(entry["jid"], jid)
        self.assertFalse((self.probe / "imported").exists())

    def test_a_task_enqueued_from_a_view_runs_and_its_result_is_read_back(self) -> None:
        response = self.client.post("/compute", json.dumps({"a": 2, "b": 3}),
                                    content_type="application/json")
        result_id = response.json()["result_id"]
        result = wait_for(lambda: (r := add.get_result(result_id)).is_finished and r)
        self.assertEqual(result.return_value, 5)
        self.assertEqual(result.attempts, 1)
        self.assertEqual(result.args, [2, 3])
        self.assertIsNotNone(result.finished_at)

    def test_aenqueue_from_an_async_view(self) -> None:
        response = self.client.post("/compute-async", json.dumps({"a": 20, "b": 22}),
                                    content_type="application/json")
        result = add.get_result(response.json()["result_id"])
        wait_for(lambda: (result.refresh(), result.is_finished)[1])
        self.assertEqual(result.return_value, 42)

    def test_a_tasks_result_is_kept_in_wurks_result_store(self) -> None:
        """The return value lives where any wurk job keeps its own: a ResultHandle made from
        the result id waits for it, woken by Redis, and a failure is typed."""
        result = add.enqueue(4, 5)
        self.assertEqual(wurk.ResultHandle(result.id).result(timeout=30), 9)
        result.refresh()
        self.assertTrue(result.is_finished)
        self.assertEqual(result.return_value, 9)
        failed = refuse.enqueue("not today")
        with self.assertRaises(wurk.JobFailed) as raised:
            wurk.ResultHandle(failed.id).result(timeout=30)
        self.assertEqual(raised.exception.error_class, "PermissionError")
        self.assertEqual(raised.exception.message, "not today")

    def test_a_hostile_record_neither_stops_the_task_nor_fails_its_result(self) -> None:
        # A record written by hand or by something else: a key of another type reads as
        # missing, a field of the wrong shape as absent, and the task runs all the same.
        try:
            from django.tasks.exceptions import TaskResultDoesNotExist
        except ImportError:
            from django_tasks.exceptions import TaskResultDoesNotExist
        config = wurk.default_config()
        other_type, odd = config.keys.task_result("h" * 24), config.keys.task_result("j" * 24)
        hostile = {"task": "shop.tasks.add", "status": "READY", "worker_ids": "me",
                   "errors": 5, "enqueued_at": 1e300, "ttl": 10**30, "args": "x"}
        config.pool("client").run(lambda r: (r.hset(other_type, "task", "shop.tasks.add"),
                                             r.set(odd, json.dumps(hostile))))
        with self.assertRaises(TaskResultDoesNotExist), self.assertLogs("wurk", "WARNING"):
            add.get_result("h" * 24)
        with self.assertLogs("wurk", "WARNING") as logged:
            read = add.get_result("j" * 24)
        self.assertEqual((str(read.status), read.enqueued_at, read.args), ("READY", None, []))
        self.assertIn("worker_ids, errors, args, ttl, enqueued_at", logged.output[0])
        for jid in ("h" * 24, "j" * 24):
            wurk.push({"class": "shop.tasks.add", "args": [[2, 3], {}], "jid": jid,
                       "result_ttl": 600})

        def finished(jid):  # the key of another type reads as missing until the job's write
            try:
                return (r := add.get_result(jid)).is_finished and r
            except TaskResultDoesNotExist:
                return None

        for jid in ("h" * 24, "j" * 24):
            done = wait_for(lambda jid=jid: finished(jid))
            self.assertEqual((str(done.status), done.return_value, done.attempts),
                             ("SUCCESSFUL", 5, 1))

    def test_a_task_that_takes_its_context(self) -> None:
        result = attempt_number.enqueue("first")
        wait_for(lambda: (result.refresh(), result.is_finished)[1])
        self.assertEqual(result.return_value, "first: attempt 1")

    def test_a_failed_task_without_retries_is_failed_with_its_error(self) -> None:
        result = refuse.enqueue("no")
        wait_for(lambda: (result.refresh(), result.is_finished)[1])
        self.assertEqual(str(result.status), "FAILED")
        self.assertEqual(result.errors[0].exception_class_path, "builtins.PermissionError")
        self.assertIn("PermissionError: no", result.errors[0].traceback)

    def test_a_job_pushed_in_a_view_reads_the_committed_row(self) -> None:
        order_id = self.client.post("/orders", {"item": "lamp"}).json()["order"]
        wait_for(lambda: Order.objects.get(id=order_id).shipped)


class Dashboard(TestCase):
    def test_staff_see_the_dashboard_under_the_mount(self) -> None:
        staff = User.objects.create_user("ada", password="pw", is_staff=True)
        self.client.force_login(staff)
        page = self.client.get("/wurk/")
        self.assertEqual(page.status_code, 200)
        html = page.content.decode()
        self.assertIn('href="/wurk/queues"', html)
        queues = self.client.get("/wurk/queues")
        self.assertEqual(queues.status_code, 200)
        stats = self.client.get("/wurk/stats")
        self.assertEqual(stats.status_code, 200)
        self.assertIn("processed", stats.content.decode())
        # The live stream is off under a WSGI host: 204 tells the browser not to reconnect.
        self.assertEqual(self.client.get("/wurk/stats/stream").status_code, 204)

    def test_dashboard_urls_live_true_turns_the_stream_on(self) -> None:
        # django.md: "on a threaded or async server, dashboard_urls(live=True) turns the
        # stream on" (off, it answers 204: test_staff_see_the_dashboard_under_the_mount).
        self.client.force_login(User.objects.create_user("liv", password="pw", is_staff=True))
        with self.settings(ROOT_URLCONF="shop.tests"):
            stream = self.client.get("/wurk/stats/stream")
            try:
                self.assertEqual(stream.status_code, 200)
                self.assertTrue(stream["Content-Type"].startswith("text/event-stream"))
                self.assertTrue(stream.streaming)
            finally:
                # Closed unread: Django's request_finished would close this test's database
                # connection (its client does this same dance for a stream read to the end).
                request_finished.disconnect(close_old_connections)
                try:
                    stream.close()
                finally:
                    request_finished.connect(close_old_connections)

    def test_the_dashboard_answers_the_hosts_django_allows(self) -> None:
        self.client.force_login(User.objects.create_user("eve", password="pw", is_staff=True))
        with self.settings(ALLOWED_HOSTS=["jobs.example.com"]):
            page = self.client.get("/wurk/queues", HTTP_HOST="jobs.example.com")
            self.assertEqual(page.status_code, 200)  # a public name, no wurk setting needed
            self.assertEqual(self.client.get("/wurk/queues", HTTP_HOST="evil.example").status_code,
                             400)  # Django's own ALLOWED_HOSTS refusal

    def test_djangos_csrf_check_is_skipped_and_the_dashboards_own_is_not(self) -> None:
        from django.test import Client

        flush_redis()
        config = wurk.default_config()
        config.pool("client").run(lambda r: r.zadd(config.keys.retry, {
            json.dumps({"class": "X", "args": [], "jid": "e" * 24}): time.time()}))
        client = Client(enforce_csrf_checks=True)  # Django's check on, as in a browser
        client.force_login(User.objects.create_user("csrf", password="pw", is_staff=True))
        form = {"action": "delete", "all": "1"}
        same_origin = {"HTTP_SEC_FETCH_SITE": "same-origin",
                       "content_type": "application/x-www-form-urlencoded"}  # as a <form>
        refused = client.post("/wurk/retries", urlencode(form), **same_origin)
        self.assertEqual(refused.status_code, 403)
        self.assertIn("CSRF", refused.content.decode())
        token = client.get("/wurk/api/csrf").json()["token"]
        done = client.post("/wurk/retries", urlencode({**form, "csrf_token": token}),
                           **same_origin)
        self.assertEqual(done.status_code, 303)  # no Django token: the dashboard's sufficed
        self.assertEqual(config.pool("client").run(lambda r: r.zcard(config.keys.retry)), 0)

    def test_a_non_staff_user_is_refused(self) -> None:
        self.client.force_login(User.objects.create_user("bob", password="pw"))
        self.assertEqual(self.client.get("/wurk/").status_code, 403)
        self.assertEqual(self.client.get("/wurk/stats").status_code, 403)

    def test_an_anonymous_visitor_is_sent_to_log_in(self) -> None:
        response = self.client.get("/wurk/queues")
        self.assertEqual(response.status_code, 302)
        self.assertTrue(response["Location"].startswith("/login/?next=/wurk/queues"))


class CapturedCommit(TestCase):
    """What testing.md suggests for a TestCase with client="transactional": the commit's
    callbacks run by Django's test helper, each push attempted and every failure logged, as
    at a real commit."""

    def setUp(self) -> None:
        flush_redis()
        use_on_commit(self)

    def test_captured_callbacks_push_every_job_and_log_each_failure(self) -> None:
        refuse_even_orders(self)
        # Django's test helper runs robust callbacks as a commit does, logging on its own
        # logger.
        with self.assertLogs("django.test", "ERROR") as logged, \
                self.captureOnCommitCallbacks(execute=True):
            for n in range(1, 5):
                ship_order.perform_async(n)
        self.assertEqual(sorted(job["args"][0] for job in queued()), [1, 3])
        self.assertEqual(len(logged.records), 2)


class SavepointsAndSettings(TransactionTestCase):
    def setUp(self) -> None:
        flush_redis()

    def test_a_savepoint_rolled_back_drops_only_its_push(self) -> None:
        with transaction.atomic():
            ship_order.perform_async(1)
            push_in_a_savepoint_rolled_back(2)
        wurk.testing.relay_outbox()
        self.assertEqual([job["args"] for job in queued()], [[1]])

    def test_a_bad_push_inside_atomic_raises_at_the_call(self) -> None:
        with transaction.atomic():
            with self.assertRaisesRegex(wurk.InvalidArguments, "argument 0 is bytes"):
                ship_order.perform_async(b"not JSON")
            ship_order.perform_async(1)
        wurk.testing.relay_outbox()
        self.assertEqual([job["args"] for job in queued()], [[1]])

    def test_every_push_is_attempted_at_the_commit_and_each_failure_logged(self) -> None:
        use_on_commit(self)
        refuse_even_orders(self)
        after: list[str] = []
        with self.assertLogs("django.db.backends.base", "ERROR") as logged, \
                transaction.atomic():
            for n in range(1, 6):
                ship_order.perform_async(n)
            transaction.on_commit(lambda: after.append("ran"))  # the application's own
        self.assertEqual(sorted(job["args"][0] for job in queued()), [1, 3, 5])
        self.assertEqual(len(logged.records), 2)
        self.assertIn("refused 2", logged.output[0])
        self.assertEqual(after, ["ran"])

    def test_an_unknown_setting_is_named(self) -> None:
        from django.core.exceptions import ImproperlyConfigured

        from wurk.contrib.django.settings import build_config

        with self.settings(WURK={"CONCURENCY": 3}), \
                self.assertRaisesRegex(ImproperlyConfigured, "unknown setting 'concurency'"):
            build_config()

    def test_keys_in_any_case_the_apps_own_defaults_and_redis_url_from_the_environment(
            self) -> None:
        from wurk.contrib.django.settings import app_settings, build_config

        with self.settings(WURK={"concurrency": 3, "Shutdown_Grace": 2}):
            config = build_config()
            self.assertEqual((config.concurrency, config.shutdown_grace), (3, 2))
        with self.settings(WURK={}, DEBUG=True):
            own = app_settings()
            self.assertEqual((own.database, own.imports, own.autoreload), ("default", (), True))
        with self.settings(WURK={}, DEBUG=False):
            self.assertFalse(app_settings().autoreload)
        with self.settings(WURK={"REDIS_URL": "redis://127.0.0.1:1/0"}):
            self.assertEqual(build_config().redis_url, os.environ["REDIS_URL"])  # env wins

    def test_the_outbox_is_polled_every_second_by_default(self) -> None:
        # django.md: "every worker's poll (OUTBOX_POLL_INTERVAL, 1 s)".
        from wurk.contrib.django.settings import build_config

        with self.settings(WURK={}):
            self.assertEqual(build_config().outbox_poll_interval, 1.0)
        with self.settings(WURK={"OUTBOX_POLL_INTERVAL": 0.25}):
            self.assertEqual(build_config().outbox_poll_interval, 0.25)

    def test_client_default_turns_the_deferral_off(self) -> None:
        from wurk.contrib.django.settings import build_config

        with self.settings(WURK={"CLIENT": "default"}):
            self.assertEqual(build_config().client, "default")
        with self.settings(WURK={"CLIENT": "transactional"}):
            self.assertEqual(build_config().client, "transactional")
        self.assertEqual(build_config().client, "outbox")

    def test_the_dashboard_refuses_without_authentication_middleware(self) -> None:
        middleware = ["django.contrib.sessions.middleware.SessionMiddleware"]
        with self.settings(MIDDLEWARE=middleware), self.assertLogs("wurk.web", "WARNING"):
            self.assertEqual(self.client.get("/wurk/").status_code, 403)


class TaskResults(TransactionTestCase):
    def setUp(self) -> None:
        flush_redis()

    def test_run_after_schedules_the_task(self) -> None:
        from datetime import timedelta

        from django.utils import timezone

        result = add.using(run_after=timezone.now() + timedelta(hours=1)).enqueue(1, 2)
        config = wurk.default_config()
        scheduled = config.pool("client").run(lambda r: r.zrange(config.keys.schedule, 0, -1))
        self.assertEqual([json.loads(raw)["jid"] for raw in scheduled], [result.id])
        self.assertEqual(str(add.get_result(result.id).status), "READY")

    def test_a_task_marked_done_before_its_value_landed_is_still_running(self) -> None:
        # A worker marks the task's record inside the job and stores the value just outside
        # it: between the two, a reader must not see it finished with None.
        from wurk.results import find

        result = add.enqueue(2, 3)
        backend = add.get_backend()
        backend.store.update(result.id, lambda record: record.update(status="SUCCESSFUL"))
        self.assertIsNone(find(wurk.default_config(), result.id))
        self.assertEqual(str(add.get_result(result.id).status), "RUNNING")

    def test_a_result_is_kept_a_day_by_default(self) -> None:
        # django.md: "RESULT_TTL (seconds a result is kept after its last change, default
        # 86400)": the task's job carries it, and its record expires after it.
        result = add.enqueue(1, 2)
        (job,) = queued()
        self.assertEqual((job["jid"], job["result_ttl"]), (result.id, 86400))
        config = wurk.default_config()
        ttl = config.pool("client").run(lambda r: r.ttl(config.keys.task_result(result.id)))
        self.assertTrue(86400 - 60 <= ttl <= 86400, ttl)

    def test_a_result_whose_tasks_module_is_not_loaded_does_not_exist(self) -> None:
        # django.md: "A task's module not loaded in the process reading the result:
        # TaskResultDoesNotExist."
        try:
            from django.tasks.exceptions import TaskResultDoesNotExist
        except ImportError:
            from django_tasks.exceptions import TaskResultDoesNotExist
        import sys

        result = add.enqueue(3, 4)
        self.assertEqual(str(add.get_result(result.id).status), "READY")
        add.get_backend().store.update(
            result.id, lambda record: record.update(task="shop.reports.total"))
        self.assertNotIn("shop.reports", sys.modules)
        with self.assertRaises(TaskResultDoesNotExist):
            add.get_result(result.id)

    def test_enqueue_sends_task_enqueued(self) -> None:
        try:
            from django.tasks.signals import task_enqueued
        except ImportError:
            from django_tasks.signals import task_enqueued
        seen = []

        def receiver(sender, task_result, **kwargs):
            seen.append(task_result.id)

        task_enqueued.connect(receiver)
        try:
            result = add.enqueue(1, 1)
        finally:
            task_enqueued.disconnect(receiver)
        self.assertEqual(seen, [result.id])

    def test_an_unreadable_record_reads_as_missing(self) -> None:
        try:
            from django.tasks.exceptions import TaskResultDoesNotExist
        except ImportError:
            from django_tasks.exceptions import TaskResultDoesNotExist
        config = wurk.default_config()
        config.pool("client").run(lambda r: r.set(config.keys.task_result("x" * 24), "{oops"))
        with self.assertRaises(TaskResultDoesNotExist), self.assertLogs("wurk", "WARNING"):
            add.get_result("x" * 24)
        with self.assertRaises(TaskResultDoesNotExist):
            add.get_result("y" * 24)
