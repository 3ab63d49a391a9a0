"""Integrations with the frameworks Python teams use, each behind its own extra.

``wurk.contrib.django`` (``wurk[django]``), ``wurk.contrib.flask`` (``wurk[flask]``),
``wurk.contrib.fastapi`` (``wurk[fastapi]``), ``wurk.contrib.sqlalchemy``
(``wurk[sqlalchemy]``). Importing this package imports none of them.
"""
