"""The Django example project's own test suite, under Django's test runner, with a real
server and a real worker (``examples/django_shop/shop/tests.py``)."""

from __future__ import annotations

import re

from tests.frameworks.conftest import EXAMPLES, run_example

PROJECT = EXAMPLES / "django_shop"


def test_the_django_example_passes_under_djangos_test_runner(
        example_env: dict[str, str]) -> None:
    result = run_example(PROJECT, ["manage.py", "test", "shop", "-v", "2"], env=example_env)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    ran = re.search(r"Ran (\d+) tests?", output)
    assert ran is not None and int(ran.group(1)) >= 35, output
    for name in ("test_a_commit_pushes_one_job_after_the_commit",
                 "test_a_rollback_pushes_nothing",
                 "test_a_bad_push_inside_atomic_raises_at_the_call",
                 "test_every_push_is_attempted_at_the_commit_and_each_failure_logged",
                 "test_captured_callbacks_push_every_job_and_log_each_failure",
                 "test_a_task_enqueued_from_a_view_runs_and_its_result_is_read_back",
                 "test_a_non_staff_user_is_refused",
                 "test_staff_see_the_dashboard_under_the_mount",
                 "test_a_payloads_class_name_is_never_imported",
                 "test_keys_in_any_case_the_apps_own_defaults_and_redis_url_from_the_environment",
                 "test_djangos_csrf_check_is_skipped_and_the_dashboards_own_is_not",
                 "test_each_job_runs_between_two_close_old_connections_calls",
                 "test_dashboard_urls_live_true_turns_the_stream_on",
                 "test_the_outbox_is_polled_every_second_by_default",
                 "test_a_result_is_kept_a_day_by_default",
                 "test_a_result_whose_tasks_module_is_not_loaded_does_not_exist",
                 "test_a_hostile_record_neither_stops_the_task_nor_fails_its_result"):
        # "ok" may come lines after the name: a worker's log lines land in between
        assert re.search(rf"^{name} \(.*\) \.\.\. (?:.*\n)*?(?:.* )?ok$", output, re.M), \
            f"{name} did not pass:\n{output}"
