"""corral benchmarks: tables of figures beside real Slurm's, never pass/fail tests.

Run everything with ``.venv/bin/python bench/run_all.py`` (``--quick`` for a smoke run,
``--phases`` to choose). Each phase is also a module with its own ``main``.
"""
