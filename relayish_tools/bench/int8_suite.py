"""The integer suite: relayish's int8 models against onnxruntime's and OpenVINO's int8 execution, untuned.

    python -m models resnet18_int8 mobilenet_v2_int8 resnet18_int8_dynamic gpt_int8_dynamic resnet18 mobilenet_v2 gpt \
        --out int8/
    python -m relayish_tools.bench.int8_suite int8/ [--wild wild/] [--models A,B] [--threads 2] [--repeat 30]
        [--seeds 8] [--json docs/data/int8.json]

Each int8 model (models/quantized.py: onnxruntime's quantization tool applied to a suite model, static QDQ or
dynamic; with --wild, also the real-world suite's int8 models: ddddocr_int8) is compiled untuned, checked against
onnxruntime's int8 result and timed beside onnxruntime and OpenVINO (bench/suite.py: one process, same inputs and
threads, steady-state blocks). Accuracy, over --seeds seeded inputs:
  - "max_rel_error": max |relayish - onnxruntime int8| / max |onnxruntime int8| over every output and seed; within
    INT8_TOLERANCE it agrees. An int8 result is not a continuous function of the input: a value on a rounding tie
    of a quantization (or of DynamicQuantizeLinear's range) lands one step apart when the float arithmetic before
    it differs in its last bit, as onnxruntime's own fused and unfused paths do (tests/test_qnn.py DYNAMIC_RTOL);
  - "top1_vs_float": the fraction of rows (the first output's last axis: classes, or a token's vocabulary) whose
    argmax equals that of the float model (onnxruntime fp32 on the model it was quantized from, `<base>.onnx` in
    the same folder), for relayish and for onnxruntime's int8 run ("ort_top1_vs_float"): quantization's own loss,
    and whether relayish adds to it; "top1_vs_ort": the same against onnxruntime's int8 result. None where the
    folder has no float twin (ddddocr_int8 was quantized from a model that is not published).

--json writes {"benchmark": "int8_suite", provenance (bench/report.py), "configuration", "tolerance", "rows": [per
model: bench/suite.py's row keys plus "float_model", "top1_vs_float", "ort_top1_vs_float", "top1_vs_ort", "seeds"]}
(docs/data/int8.json: bench/report_docs.py's int8 table).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

from compiler import compile_model
from runtime.timing import BLOCK_RUNS, describe_timing

from .compare import compare_with_onnxruntime, make_ort_session, run_onnxruntime
from .report import command_line, provenance
from .suite import input_shapes, openvino_engines, openvino_note, timing_cells, timing_fields, timing_head

INT8_SUITE = ("resnet18_int8", "mobilenet_v2_int8", "resnet18_int8_dynamic", "gpt_int8_dynamic")
WILD_INT8 = ("ddddocr_int8",)
INT8_TOLERANCE = 5e-2  # max |ours - ort int8| / max |ort int8|: a few quantization steps of the output


def float_twin(name: str) -> str | None:
    """The suite model an int8 suite entry was quantized from: its name before "_int8" (models/suite.py names them
    so: gpt_int8_dynamic is gpt quantized), or None for the wild ones (ddddocr_int8's float original is not
    ddddocr: that is a newer model)."""
    return None if name in WILD_INT8 or "_int8" not in name else name.split("_int8")[0]


def seeded_inputs(module, seed: int) -> dict:
    """module.random_inputs(seed), integer inputs (token ids) drawn from [0, 100) instead of {0, 1}."""
    feed = module.random_inputs(seed=seed)
    rng = np.random.default_rng(seed)
    return {k: rng.integers(0, 100, v.shape).astype(v.dtype) if v.dtype.kind in "iu" else v for k, v in feed.items()}


def top1(y: np.ndarray) -> np.ndarray:
    """The argmax of every row along the last axis (a classifier's class, a language model's next token)."""
    y = np.asarray(y)
    return y.reshape(-1, y.shape[-1]).argmax(-1) if y.ndim else y.reshape(1)


def accuracy(module, path: str, float_path: str | None, seeds: int, threads: int) -> dict:
    """The row's accuracy keys (module docstring) over `seeds` seeded inputs."""
    int8 = make_ort_session(path, threads)
    fp32 = make_ort_session(float_path, threads) if float_path else None
    worst, same, same_ort, same_float_ort, rows = 0.0, 0, 0, 0, 0
    for seed in range(seeds):
        feed = seeded_inputs(module, seed)
        ours = dict(zip(module.output_names, module.run(None, feed)))
        ref = run_onnxruntime(int8, feed)
        for name, r in ref.items():
            scale = float(np.abs(r).max()) if r.size else 0.0
            diff = float(np.abs(ours[name].astype(np.float64) - r).max()) if r.size else 0.0
            worst = max(worst, diff / scale if scale else (0.0 if diff == 0 else np.inf))
        first = next(iter(ref))
        t_ours, t_ref = top1(ours[first]), top1(ref[first])
        same_ort += int((t_ours == t_ref).sum())
        rows += t_ref.size
        if fp32 is not None:
            t_float = top1(next(iter(run_onnxruntime(fp32, feed).values())))
            same += int((t_ours == t_float).sum())
            same_float_ort += int((t_ref == t_float).sum())
    return {"max_rel_error": worst, "agree": worst <= INT8_TOLERANCE, "seeds": seeds, "top1_rows": rows,
            "top1_vs_ort": same_ort / rows, "top1_vs_float": same / rows if fp32 else None,
            "ort_top1_vs_float": same_float_ort / rows if fp32 else None,
            "float_model": os.path.basename(float_path) if float_path else None}


def bench_int8_model(path: str, threads: int, repeat: int, warmup: int, block: int, seeds: int,
                     shapes: dict | None = None) -> dict:
    """One int8 model's row: timings (relayish, onnxruntime, OpenVINO), accuracy against onnxruntime's int8 result
    and top-1 agreement with its float twin; or the error that stopped it."""
    name = os.path.splitext(os.path.basename(path))[0]
    row = {"model": name}
    try:
        module = compile_model(path, num_threads=threads, input_shapes=shapes)
    except Exception as e:  # noqa: BLE001 - one model's failure is its row's result
        row["error"] = f"compile: {type(e).__name__}: {str(e).splitlines()[0]}"
        return row
    twin = float_twin(name)
    float_path = os.path.join(os.path.dirname(path), f"{twin}.onnx") if twin else None
    row.update(accuracy(module, path, float_path if float_path and os.path.isfile(float_path) else None, seeds,
                        threads))
    extra = openvino_engines(path, threads, shapes, row)
    result = compare_with_onnxruntime(module, path, inputs=seeded_inputs(module, 0), threads=threads, repeat=repeat,
                                      warmup=warmup, block=block, extra_engines=extra, tolerance=INT8_TOLERANCE)
    row.update(timing_fields(result))
    return row


def _share(v) -> str:
    return "-" if v is None else f"{100 * v:.0f}%"


def format_table(rows: list[dict]) -> str:
    head = (f"{timing_head(22, 'ort int8')}  {'max err':>8} {'top1/float':>10} {'ort top1':>8} "
            f"{'top1/ort':>8}")
    lines = [head, "-" * len(head)]
    for r in rows:
        if "error" in r:
            lines.append(f"{r['model']:<22} {r['error']}")
            continue
        lines.append(f"{timing_cells(r, 22)}  {r['max_rel_error']:>8.1e}{'' if r['agree'] else '!'} "
                     f"{_share(r['top1_vs_float']):>10} {_share(r['ort_top1_vs_float']):>8} "
                     f"{_share(r['top1_vs_ort']):>8}" + openvino_note(r))
    return "\n".join(lines)


def model_paths(directory: str, names: list[str], wild: str | None) -> list[tuple[str, dict | None]]:
    """(path, input shapes or None) of each named model: the int8 suite in `directory`, the wild ones in `wild`."""
    found, missing = [], []
    shapes = input_shapes(wild) if wild else {}
    for name in names:
        folder = wild if name in WILD_INT8 and wild else directory
        path = os.path.join(folder, f"{name}.onnx")
        (found if os.path.isfile(path) else missing).append((path, shapes.get(name)))
    if missing:
        raise SystemExit(f"not built: {', '.join(p for p, _ in missing)} (python -m models NAME ... --out DIR; "
                         "the wild ones: python -m models --wild --out DIR)")
    return found


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m relayish_tools.bench.int8_suite", description=__doc__.split("\n\n")[0])
    p.add_argument("directory", help="folder of the int8 suite models and their float twins")
    p.add_argument("--wild", metavar="DIR", help="the real-world suite's folder: adds " + ", ".join(WILD_INT8))
    p.add_argument("--models", help=f"comma-separated names (default: {', '.join(INT8_SUITE)})")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeat", type=int, default=30, help="timed runs per engine (default 30)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--block", type=int, default=BLOCK_RUNS, help="consecutive runs per engine turn")
    p.add_argument("--seeds", type=int, default=8, help="seeded inputs of the accuracy and top-1 columns")
    p.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    args = p.parse_args(argv)
    names = args.models.split(",") if args.models else list(INT8_SUITE) + (list(WILD_INT8) if args.wild else [])
    paths = model_paths(args.directory, names, args.wild)
    print(f"threads {args.threads}; " + describe_timing("steady", args.repeat, args.warmup, args.block)
          + f"; accuracy over {args.seeds} seeded inputs, tolerance {INT8_TOLERANCE:g}", flush=True)
    rows = []
    for path, shapes in paths:
        rows.append(bench_int8_model(path, args.threads, args.repeat, args.warmup, args.block, args.seeds, shapes))
        print(format_table(rows[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
    print(format_table(rows))
    if args.json:
        report = {"benchmark": "int8_suite", **provenance(command_line("python -m relayish_tools.bench.int8_suite",
                                                                         argv)),
                  "configuration": {"threads": args.threads, "timing": "steady", "repeat": args.repeat,
                                    "warmup": args.warmup, "block": args.block, "seeds": args.seeds},
                  "tolerance": INT8_TOLERANCE, "rows": rows}
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1, default=float)
            f.write("\n")
    return 0 if all(r.get("agree", False) for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
