"""NonMaxSuppression against onnxruntime: a detector's post-processing over seeded boxes and scores.

    python -m relayish_tools.bench.nms [--boxes 1000,8400] [--classes 1,80] [--fraction 0.01,0.1]
                        [--max-output 100] [--threads 2] [--repeat 30] [--json FILE]

Each case is one NonMaxSuppression node (IoU threshold 0.45, score threshold 0.25, as YOLO exports write them)
over N boxes scattered over a 640x640 image and C classes whose scores are above the threshold for about a
`fraction` of the boxes. It compiles to the generic tier (the kept count is known only at run time: relayish/ops/
data_sized.py), is checked equal to onnxruntime's indices and timed with it in one process, same inputs and
threads, in steady state (runtime.timing.time_engines). Printed per case: both medians and their ratio (below 1:
ours is faster), then the geomean and the worst ratio.
"""
from __future__ import annotations

import argparse
import math
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from relayish_tools.bench.compare import make_ort_session
from runtime.timing import BLOCK_RUNS, IDLE_GAP_S, describe_timing, time_engines

IOU, SCORE = 0.45, 0.25


def nms_case(boxes: int, classes: int, fraction: float, max_output: int, seed: int = 0):
    """(model, feed) of one NonMaxSuppression node over seeded boxes [1, N, 4] and scores [1, C, N]."""
    rng = np.random.default_rng(seed)
    centers, sizes = rng.uniform(0, 640, (1, boxes, 2)), rng.uniform(5, 60, (1, boxes, 2))
    corners = np.concatenate([centers - sizes / 2, centers + sizes / 2], 2).astype(np.float32)
    above = rng.random((1, classes, boxes)) < fraction / (1 - SCORE)  # uniform scores: 1 - SCORE of them pass
    scores = np.where(above, rng.random((1, classes, boxes)), 0).astype(np.float32)
    consts = [numpy_helper.from_array(np.array([max_output], np.int64), "max_output"),
              numpy_helper.from_array(np.array([IOU], np.float32), "iou"),
              numpy_helper.from_array(np.array([SCORE], np.float32), "score")]
    node = helper.make_node("NonMaxSuppression", ["boxes", "scores", "max_output", "iou", "score"], ["selected"])
    graph = helper.make_graph([node], "nms", [
        helper.make_tensor_value_info("boxes", TensorProto.FLOAT, corners.shape),
        helper.make_tensor_value_info("scores", TensorProto.FLOAT, scores.shape)],
        [helper.make_tensor_value_info("selected", TensorProto.INT64, (None, 3))], consts)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model, {"boxes": corners, "scores": scores}


def run(boxes: int, classes: int, fraction: float, max_output: int, threads: int, repeat: int,
        warmup: int) -> dict:
    from compiler import compile_model
    model, feed = nms_case(boxes, classes, fraction, max_output)
    ours = compile_model(model, num_threads=threads, cache=False)
    theirs = make_ort_session(model.SerializeToString(), threads)
    got, want = ours.run(None, feed)[0], theirs.run(None, feed)[0]
    row = {"shape": f"N={boxes} C={classes} above {fraction:g}", "boxes": boxes, "classes": classes,
           "fraction": fraction, "max_output": max_output, "kept": len(want)}
    if not np.array_equal(got, want):
        return {**row, "ratio": None, "error": f"indices differ from onnxruntime's: {got.shape} vs {want.shape}"}
    stats = time_engines([("ours", lambda: ours.run(None, feed)), ("onnxruntime", lambda: theirs.run(None, feed))],
                         "steady", repeat, warmup, IDLE_GAP_S, BLOCK_RUNS)
    ours_ms, ort_ms = stats["ours"]["median_ms"], stats["onnxruntime"]["median_ms"]
    return {**row, "ours_ms": ours_ms, "ort_ms": ort_ms, "ratio": ours_ms / ort_ms}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m relayish_tools.bench.nms", description=__doc__.split("\n\n")[0])
    p.add_argument("--boxes", default="1000,8400")
    p.add_argument("--classes", default="1,80")
    p.add_argument("--fraction", default="0.01,0.1", help="the share of boxes above the score threshold per class")
    p.add_argument("--max-output", type=int, default=100)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeat", type=int, default=30)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args(argv)
    rows = []
    for n in (int(v) for v in args.boxes.split(",")):
        for c in (int(v) for v in args.classes.split(",")):
            for fraction in (float(v) for v in args.fraction.split(",")):
                row = run(n, c, fraction, args.max_output, args.threads, args.repeat, args.warmup)
                rows.append(row)
                what = f"{row['shape']:28s} kept {row['kept']:<5d}"
                print(what + (f" FAILED {row['error']}" if row["ratio"] is None else
                              f" ours {row['ours_ms']:8.3f} ms  onnxruntime {row['ort_ms']:8.3f} ms  "
                              f"ratio {row['ratio']:.2f}"), flush=True)
    ratios = [r["ratio"] for r in rows if r["ratio"] is not None]
    print(f"\nrelayish / onnxruntime, {args.threads} threads; {describe_timing('steady', args.repeat, args.warmup)}")
    if ratios:
        print(f"geomean {math.exp(np.mean(np.log(ratios))):.2f}  worst {max(ratios):.2f}  ({len(ratios)} cases)")
    if args.json:
        import json

        from relayish_tools.bench.report import provenance
        with open(args.json, "w") as f:
            json.dump({"benchmark": "nms", **provenance("python -m relayish_tools.bench.nms " +
                                                         " ".join(sys.argv[1:] if argv is None else argv)),
                       "threads": args.threads, "repeat": args.repeat, "cases": rows}, f, indent=1)
    return 0 if len(ratios) == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
