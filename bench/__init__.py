"""sluice's benchmark scripts (``python -m bench``: see ``bench/__main__.py``).

The scripts run as scripts (``python bench/mcmc.py``) and import their
neighbours (``harness``, ``samplers``, ``targets``) as top-level modules;
this file only makes the folder runnable with ``python -m bench``.
"""
