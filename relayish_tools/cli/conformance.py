"""`relayish conformance [--ops Relu,Conv] [--engine relayish|onnxruntime] [--json F]`: onnx's generated node
cases run as a user would run them, in child workers (conformance/); the same options as `python -m relayish_tools.conformance`."""
from __future__ import annotations


def add_conformance_parser(sub) -> None:
    from relayish_tools.conformance import add_arguments
    p = sub.add_parser("conformance", help="run onnx's conformance cases on relayish (or onnxruntime)",
                       description="Run onnx's generated node cases in child workers: pass / wrong / crash / "
                                   "unsupported / other-error counts and the failures grouped by reason.")
    add_arguments(p)
    p.set_defaults(func=cmd_conformance)


def cmd_conformance(args) -> int:
    from relayish_tools.conformance import run_from_args
    return run_from_args(args)
