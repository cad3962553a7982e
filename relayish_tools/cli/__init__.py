"""The `relayish` command line (the console script's entry point is `relayish_tools.cli.main`); see main.py for
usage.

It sits on top of every other package (compiler, tuning, bench, runtime) and nothing imports it.
"""
from .main import build_parser, main

__all__ = ["build_parser", "main"]
