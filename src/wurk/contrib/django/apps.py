"""The Django app: builds wurk's configuration from ``settings.WURK`` once Django is ready."""

from __future__ import annotations

from django.apps import AppConfig

__all__ = ["WurkAppConfig"]


class WurkAppConfig(AppConfig):
    name = "wurk.contrib.django"
    label = "wurk"
    verbose_name = "wurk"

    def ready(self) -> None:
        from ...config import configure
        from .settings import build_config

        configure(build_config())
