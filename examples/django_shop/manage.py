#!/usr/bin/env python
"""The example shop's manage.py: ``python manage.py test shop``, ``python manage.py wurk``."""

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shop_site.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
