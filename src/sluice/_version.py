"""sluice's version (read by pyproject.toml, recorded in every store)."""

__version__ = "0.1.0"
