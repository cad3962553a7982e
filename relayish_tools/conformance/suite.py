"""`python -m relayish_tools.conformance [--ops Relu,Conv] [--engine relayish|onnxruntime] [--workers 2] [--json F]`: run the
onnx conformance cases on one engine in child workers and print the counts and the failures grouped by reason.
Exit status 1 if any case is wrong or crashed, else 0 (an unsupported case is a missing feature, not a fault)."""
from __future__ import annotations

import argparse
import os
import sys
import time

from .cases import load_cases, select
from .engines import ENGINES, CaseResult
from .pool import run_cases
from .report import counts, format_report, write_json


def run_suite(engine: str = "relayish", ops=None, names=None, workers: int = 2, timeout: float = 60.0,
              progress=None) -> list[CaseResult]:
    """The results of the selected cases (see cases.select) on `engine` (a key of engines.ENGINES)."""
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; known: {sorted(ENGINES)}")
    cases = select(load_cases(), ops, names)
    return run_cases(cases, ENGINES[engine], workers=workers, timeout=timeout, on_result=progress)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m relayish_tools.conformance", description=__doc__.split("\n\n")[0])
    add_arguments(p)
    return p


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The suite's options, on `p` (python -m relayish_tools.conformance, and `relayish conformance` in cli/)."""
    p.add_argument("--ops", help="comma-separated op types: only the cases all of whose nodes are among them")
    p.add_argument("-k", "--cases", help="comma-separated substrings: only the cases whose name contains one")
    p.add_argument("--engine", choices=sorted(ENGINES), default="relayish")
    p.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1), help="child processes (default 2)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per case before its worker is killed")
    p.add_argument("--json", metavar="FILE", help="also write every case's result to FILE")
    p.add_argument("-v", "--verbose", action="store_true", help="print each case's result as it arrives")


def main(argv: list[str] | None = None) -> int:
    return run_from_args(_parser().parse_args(argv))


def run_from_args(args: argparse.Namespace) -> int:
    """Run the suite as `add_arguments`' options say; print the report; exit code 1 if a case is wrong or crashed."""
    ops = args.ops.split(",") if args.ops else None
    names = args.cases.split(",") if args.cases else None
    progress = (lambda r: print(f"{r.status:11s} {r.name}  {r.message.splitlines()[0][:150] if r.message else ''}",
                                flush=True)) if args.verbose else None
    start = time.perf_counter()
    results = run_suite(args.engine, ops, names, args.workers, args.timeout, progress)
    seconds = time.perf_counter() - start
    print(format_report(args.engine, results, seconds))
    if args.json:
        write_json(args.json, args.engine, results, seconds)
    found = counts(results)
    return 1 if found["wrong"] or found["crash"] else 0


if __name__ == "__main__":
    sys.exit(main())
