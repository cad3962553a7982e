"""Recurrent layers against onnxruntime: a grid of one-node LSTM / GRU / RNN models.

    python -m relayish_tools.bench.rnn [--ops LSTM,GRU] [--seq 8,64,512] [--batch 1,4] [--hidden 64,128,256,512]
                        [--directions forward,bidirectional] [--input N] [--threads 2] [--repeat 30] [--json FILE]

Each case is one node with seeded weights (W, R, B initializers; the input size is the hidden size unless --input
says otherwise), compiled untuned, checked against onnxruntime (max |ours - ort| / max |ort| <= 1e-4) and timed with
it in one process, same inputs and threads, in steady state (bench/compare.py, as bench/shapes.py). Printed per
case: both medians and their ratio (below 1: ours is faster); then the geomean and worst ratio per op. Timings on a
machine shared with other work are noisy: compare ratios of one run, and repeat.
"""
from __future__ import annotations

import argparse
import itertools
import math
import sys
import time

import numpy as np

from relayish_tools.bench.shapes import Case, one_node, run_case

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def rnn_model(op: str, seq: int, batch: int, inputs: int, hidden: int, direction: str, seed: int = 0,
              **attrs) -> Case:
    """A one-node `op` model over x [seq, batch, inputs] with seeded weights, outputs Y and the final states."""
    rng = np.random.default_rng(seed)
    g, d = GATES[op], 2 if direction == "bidirectional" else 1
    x = rng.standard_normal((seq, batch, inputs)).astype(np.float32)
    consts = {"W": (rng.standard_normal((d, g * hidden, inputs)) / math.sqrt(inputs)).astype(np.float32),
              "R": (rng.standard_normal((d, g * hidden, hidden)) / math.sqrt(hidden)).astype(np.float32),
              "B": (rng.standard_normal((d, 2 * g * hidden)) * 0.1).astype(np.float32)}
    model = one_node(op, {"x": x}, consts, dict(hidden_size=hidden, direction=direction, **attrs),
                     n_out=3 if op == "LSTM" else 2)
    shape = f"{op} T={seq} B={batch} I={inputs} H={hidden} {direction}" + "".join(f" {k}={v}" for k, v in
                                                                                attrs.items())
    return Case(op.lower(), shape, model, {"x": x}, 2.0 * seq * batch * d * g * hidden * (inputs + hidden))


def _ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",")]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m relayish_tools.bench.rnn", description=__doc__.split("\n\n")[0])
    p.add_argument("--ops", default="LSTM,GRU")
    p.add_argument("--seq", default="8,64,512")
    p.add_argument("--batch", default="1,4")
    p.add_argument("--hidden", default="64,128,256,512")
    p.add_argument("--input", type=int, help="input size (default: the hidden size)")
    p.add_argument("--directions", default="forward,bidirectional")
    p.add_argument("--linear-before-reset", type=int, default=1, help="GRU's attribute (default 1, as PyTorch)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeat", type=int, default=30)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args(argv)
    ops = args.ops.split(",")
    unknown = [o for o in ops if o not in GATES]
    if unknown:
        p.error(f"unknown op(s) {unknown}; ops: {', '.join(GATES)}")
    rows = []
    grid = itertools.product(ops, _ints(args.seq), _ints(args.batch), _ints(args.hidden), args.directions.split(","))
    for op, seq, batch, hidden, direction in grid:
        attrs = {"linear_before_reset": args.linear_before_reset} if op == "GRU" else {}
        case = rnn_model(op, seq, batch, args.input or hidden, hidden, direction, **attrs)
        row = run_case(case, args.threads, args.repeat, args.warmup)
        rows.append(row)
        if row["ratio"] is None:
            print(f"{case.shape:55s} FAILED {row['error']}", flush=True)
        else:
            print(f"{case.shape:55s} ours {row['ours_ms']:8.3f} ms  onnxruntime {row['ort_ms']:8.3f} ms  "
                  f"ratio {row['ratio']:.2f}", flush=True)
    print(f"\nrelayish / onnxruntime, {args.threads} threads, steady state, median of {args.repeat} runs each")
    for op in ops:
        ratios = [r["ratio"] for r in rows if r["shape"].startswith(op + " ") and r["ratio"] is not None]
        if ratios:
            print(f"{op:5s} geomean {math.exp(np.mean(np.log(ratios))):.2f}  worst {max(ratios):.2f}  "
                  f"({len(ratios)} cases)")
    if args.json:
        import json

        from relayish_tools.bench.report import provenance
        with open(args.json, "w") as f:
            json.dump({"benchmark": "rnn", **provenance("python -m relayish_tools.bench.rnn " + " ".join(argv or sys.argv[1:])),
                       "threads": args.threads, "repeat": args.repeat, "cases": rows}, f, indent=1, default=float)
    return 1 if any(r["ratio"] is None for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
