"""The package's version, in a module of its own so any module may read it without importing
``wurk`` itself (whose ``__init__`` imports most of the package)."""

__all__ = ["__version__"]

__version__ = "0.1.0"
