#!/usr/bin/env python
"""The outbox test project's manage.py (tests/frameworks/test_outbox_django.py runs it)."""

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "site_settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
