"""The `relayish` command line: `relayish COMMAND ...` or `python -m relayish_tools.cli COMMAND ...`.

    relayish --version
    relayish compile MODEL -o LIB [--input-shape NAME=1,3,224,224 | --input-shapes 'NAME:[1,3,224,224] ...']
                                  [--layout NCHW|NCHWc] [--records DB] [--no-winograd]   # compile, run, verify, bench
    relayish run LIB|MODEL [-i inputs.npz] [-o outputs.npz] [--print-time --repeat N --number M] [--profile]
    relayish verify MODEL          # ours vs onnxruntime on the same random inputs; exit 1 on FAIL
    relayish bench MODEL [--repeat 50] [--threads N] [--timing steady|strict] [--block 10] [--profile]
                         [--json FILE] [--plot FILE.png] [--measure-peak] [--compare-layouts]
    relayish inspect MODEL [--after PASS|import] [--layout NCHW|NCHWc] [--opt-level N] [--summary-only]
    relayish tune MODEL... --records DB (--trials N | --time-budget S) [--curve PNG]
    relayish records list|distill|export|import DB ...

The subcommands live in cli/commands.py (the model commands), cli/bench.py and cli/records.py; `build_parser` lists them
(SUBCOMMANDS) in help order. Exit codes: 0 success, 1 verification failed (verify; bench --compare-layouts),
2 usage or input error (printed as one line `error: ...`, no traceback).
"""
from __future__ import annotations

import argparse
import sqlite3
import sys

from .bench import add_bench_parser
from .commands import add_compile_parser, add_inspect_parser, add_run_parser, add_tune_parser, add_verify_parser
from .common import EXIT_ERROR, CliError, relayish_version
from .conformance import add_conformance_parser
from .records import add_records_parser
from .tune_compare import add_tune_compare_parser

SUBCOMMANDS = [add_compile_parser, add_run_parser, add_verify_parser, add_bench_parser, add_inspect_parser,
               add_tune_parser, add_tune_compare_parser, add_records_parser, add_conformance_parser]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="relayish", description="An ONNX model compiler and auto-tuner.")
    parser.add_argument("--version", action="version", version=f"relayish {relayish_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in SUBCOMMANDS:
        add(sub)
    return parser


def main(argv=None) -> int:
    """Entry point of the `relayish` console script; returns the exit code."""
    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # what the JSON reports print as their command line
    try:
        return args.func(args)
    except (CliError, ValueError, OSError, sqlite3.Error) as e:
        # ValueError covers compile errors (OnnxImportError, OpError, ...), runtime.LoadError and malformed
        # records; OSError covers missing files; sqlite3.Error a records file SQLite cannot use. All are the
        # user's input, not our bug: one clean line, no traceback.
        print(f"error: {e}", file=sys.stderr)
        return EXIT_ERROR
