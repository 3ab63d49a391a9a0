"""django.tasks tasks of the shop app, run by wurk (TASKS names its backend)."""

try:
    from django.tasks import task
except ImportError:  # Django < 6
    from django_tasks import task


@task
def add(a: int, b: int) -> int:
    return a + b


@task(takes_context=True)
def attempt_number(context, label: str) -> str:
    return f"{label}: attempt {context.attempt}"


@task(backend="once")
def refuse(reason: str) -> None:
    raise PermissionError(reason)
