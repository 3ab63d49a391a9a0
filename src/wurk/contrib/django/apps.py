"""The Django app: builds wurk's configuration from ``settings.WURK`` once Django is ready;
its model is the outbox table (``models.py``)."""

from __future__ import annotations

from django.apps import AppConfig

from ...config import Config

__all__ = ["WurkAppConfig"]


class WurkAppConfig(AppConfig):
    name = "wurk.contrib.django"
    label = "wurk"
    verbose_name = "wurk"
    config: Config | None = None  # built by ready(), the one embedded workers use

    def ready(self) -> None:
        from ...client.reliable import writer_for
        from ...config import configure
        from .settings import build_config

        config = self.config = configure(build_config())
        # reliable_push="disk": what a process before this one left in the buffer's
        # directory is sent from now on, not at this process's first push.
        writer_for(config)
