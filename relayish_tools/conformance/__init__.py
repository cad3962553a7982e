"""The ONNX conformance suite: onnx's own generated node cases run on relayish (or onnxruntime) as a user would
run them, in child workers that may crash or hang.

    python -m relayish_tools.conformance [--ops Relu,Conv] [--engine relayish|onnxruntime] [--workers 2] [--json F]

cases.py: the cases and their selection; engines.py: one case on one engine, and the comparison; pool.py: the
worker processes; report.py: counts, failure groups, JSON; suite.py: run_suite() and main(argv).
"""
from .cases import case_ops, load_cases, select
from .engines import ENGINES, STATUSES, CaseResult, compare
from .pool import run_cases
from .suite import add_arguments, main, run_from_args, run_suite

__all__ = ["ENGINES", "STATUSES", "CaseResult", "add_arguments", "case_ops", "compare", "load_cases", "main",
           "run_cases", "run_from_args", "run_suite", "select"]
