"""The `relayish` command line (the console script's entry point is `cli.main`); see cli/main.py for usage.

It sits on top of every other package (compiler, tuning, bench, runtime) and nothing imports it.
"""
from .main import main

__all__ = ["main"]
