"""Models with free dims, shape by shape: the first call of a shape never seen, the generic and the specialized
tier in steady state, and onnxruntime's on the same shape.

    python -m relayish_tools.bench.dynamic [MODEL.onnx] [--batches 1,2,3,4,6,8,12,16] [--images 96,...,448]
        [--bert BERT.onnx [--lengths 8,16,...]]
        [--wild DIR [--widths 160,...] [--sides 320,...] [--captcha-widths 96,...]]
        [--threads 2] [--repeat 30] [--json FILE]
    python -m relayish_tools.bench.dynamic --check DIR [DIR ...] [--batches 2,3,5]

Cases:
  - a CNN over a free batch: MODEL (default models/resnet18.onnx, `python -m models` builds it) with dim 0 of its
    input and output made free, over --batches; and the same CNN over square images of 10 sides --images (dims 2
    and 3 of its input free, one symbol each);
  - with --bert FILE (the suite's BERT: `python -m models bert`): the encoder over 16 sequence lengths --lengths
    (dim 1 of both inputs free, one symbol; batch 1);
  - with --wild DIR (the real-world suite's folder, see `python -m models --wild`): PP-OCRv6's text-line
    recognizer over --widths (its input's dim 3 free), and its text detector over 10 square image sizes --sides
    (dims 2 and 3 free, one symbol each); and ddddocr's captcha recognizer (convolutions, a bidirectional LSTM over
    the width, an 8,210-class classifier) over --captcha-widths, when the folder has it.

Per shape, in the order given, on one session made by compile_model with the dims free (specialize="auto", as a
user gets it): "first" is the first call of that shape, a shape this session has not seen (the generic tier runs
it; a model without one compiles it in the call), made right after a call of the shape before it (the session in
use, its threads and caches as a served model's, not as the other engines' timing left them). The first shape's
is the session's first call, after compile_model: its caches are cold, as those of a static compile's first call
and of a new onnxruntime session's, which are timed beside it (the module compiled for that shape, its first run
right after its compile; a new onnxruntime session's first run). Then, timed in one rotation on the same inputs
and threads in steady state (bench/compare.py): the session's generic tier
(`sess.run_generic`: the batch-1 module item by item for a free batch, else the kernels with run-time extents,
compiler/generic.py), the specialized tier (the module compiled for exactly that shape) and onnxruntime. Ratios
below 1: ours is faster. The generic tier of a model that has none is left blank.

--check: every model of the folders with dim 0 of its inputs and outputs made free (the inputs' other dims as
declared, or as the folder's wild.json gives them): whether it has a generic tier (else why not, as
compiler/batch_split.py says), and on the generic tier, batches never compiled for, the first call's time and the
largest relative error against onnxruntime.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import onnx

from compiler import compile_model
from relayish_tools.bench.compare import compare_with_onnxruntime
from relayish_tools.bench.report import provenance
from runtime.accuracy import relative_error


def with_free_dims(model: onnx.ModelProto, dims: dict[str, dict[int, str]]) -> onnx.ModelProto:
    """A copy of model whose graph inputs and outputs named in dims have those axes as dim_params (name -> {axis:
    symbol}); other outputs' declared dims are dropped (their sizes follow the inputs', and onnxruntime warns on
    every run whose outputs disagree with declared sizes)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for v in list(out.graph.input) + list(out.graph.output):
        shape = v.type.tensor_type.shape
        for axis, symbol in dims.get(v.name, {}).items():
            shape.dim[axis].ClearField("dim_value")
            shape.dim[axis].dim_param = symbol
    for v in out.graph.output:
        if v.name not in dims:
            for d in v.type.tensor_type.shape.dim:
                d.ClearField("dim_value")
                d.ClearField("dim_param")
    del out.graph.value_info[:]
    return out


def graph_inputs(model: onnx.ModelProto) -> list:
    """The graph inputs that are not initializers (what a caller feeds)."""
    names = {v.name for v in model.graph.initializer}
    return [v for v in model.graph.input if v.name not in names]


def random_feed(model: onnx.ModelProto, shapes: dict[str, tuple], seed: int) -> dict[str, np.ndarray]:
    """N(0, 1) floats; integer ids in [0, 100); an integer input named like a mask all ones (attend everywhere)."""
    rng = np.random.default_rng(seed)
    feed = {}
    for v in model.graph.input:
        if v.name not in shapes:
            continue
        dtype = onnx.helper.tensor_dtype_to_np_dtype(v.type.tensor_type.elem_type)
        shape = shapes[v.name]
        feed[v.name] = rng.standard_normal(shape).astype(dtype) if np.issubdtype(dtype, np.floating) else \
            np.ones(shape, dtype) if "mask" in v.name.lower() else rng.integers(0, 100, shape).astype(dtype)
    return feed


def batch_case(path: Path, batches: list[int]) -> dict:
    model = onnx.load(str(path))
    inp = model.graph.input[0]
    rest = tuple(d.dim_value for d in inp.type.tensor_type.shape.dim[1:])
    free = with_free_dims(model, {v.name: {0: "batch"} for v in list(model.graph.input) + list(model.graph.output)})
    return {"name": f"{path.stem} (free batch)", "model": free, "free": {inp.name: (None,) + rest},
            "shapes": [{inp.name: (b,) + rest} for b in batches]}


def width_case(path: Path, widths: list[int]) -> dict:
    """A text-line model over line widths (its input's dim 3 free; batch 1, channels and height as declared)."""
    model = onnx.load(str(path))
    inp = model.graph.input[0]
    lead = (1,) + tuple(d.dim_value for d in inp.type.tensor_type.shape.dim[1:3])
    free = with_free_dims(model, {inp.name: {0: "n", 3: "width"}})
    return {"name": f"{path.stem} (free width)", "model": free, "free": {inp.name: lead + (None,)},
            "shapes": [{inp.name: lead + (w,)} for w in widths]}


def side_case(path: Path, sides: list[int]) -> dict:
    """An image model over square images of each side (its input's dims 2 and 3 free, one symbol each; batch 1)."""
    model = onnx.load(str(path))
    inp = model.graph.input[0]
    free = with_free_dims(model, {inp.name: {0: "n", 2: "height", 3: "width"}})
    return {"name": f"{path.stem} (free height, width)", "model": free, "free": {inp.name: (1, 3, None, None)},
            "shapes": [{inp.name: (1, 3, side, side)} for side in sides]}


def length_case(path: Path, lengths: list[int]) -> dict:
    model = onnx.load(str(path))
    names = [v.name for v in graph_inputs(model)]
    free = with_free_dims(model, {n: {1: "length"} for n in names})
    return {"name": f"{path.stem} (free length)", "model": free, "free": {n: (1, None) for n in names},
            "shapes": [{n: (1, t) for n in names} for t in lengths]}


def first_ort_call_ms(data: bytes, feed: dict, threads: int) -> float:
    """The first call of a new onnxruntime session of the model, as the benchmark's sessions are made."""
    from relayish_tools.bench.compare import make_ort_session, ort_feed
    session = make_ort_session(data, threads)
    inputs = ort_feed(session, feed)
    t = time.perf_counter()
    session.run(None, inputs)
    return (time.perf_counter() - t) * 1e3


def run_case(case: dict, threads: int, repeat: int, log) -> list[dict]:
    model = case["model"]
    t0 = time.perf_counter()
    auto = compile_model(model, input_shapes=case["free"], num_threads=threads, cache=False)
    made_s = time.perf_counter() - t0
    generic = auto.generic_tier and "none" not in auto.generic_tier  # timed on the session's own generic tier
    log(f"{case['name']}: compile_model {made_s:.1f} s; generic tier: {auto.generic_tier}")
    data = model.SerializeToString()
    rows = []
    last = None
    for k, shapes in enumerate(case["shapes"]):
        feed = random_feed(model, shapes, k)
        if last is not None:  # the session in use, as a served model is: a call of a shape it has seen just before
            auto.run(None, last)
        last = feed
        t = time.perf_counter()
        auto.run(None, feed)
        first_ms = (time.perf_counter() - t) * 1e3
        auto.wait_for_specializations()
        special = auto.specialization(shapes)  # (compiled now if it is not kept yet)
        if k == 0 and generic:  # the session's first call is cold: so are a static compile's and onnxruntime's
            t = time.perf_counter()
            special.run(None, feed)
            static_first_ms = (time.perf_counter() - t) * 1e3
            ort_first_ms = first_ort_call_ms(data, feed, threads)
        extra = [("generic", lambda f: auto.run_generic(None, f))] if generic else []
        r = compare_with_onnxruntime(special, data, feed, threads=threads, repeat=repeat, extra_engines=extra)
        ort_ms = r["onnxruntime"]["median_ms"]
        shape = next(iter(shapes.values()))
        row = {"shape": list(shape), "first_ms": first_ms, "specialized_ms": r["ours"]["median_ms"],
               "generic_ms": r["generic"]["median_ms"] if generic else None, "ort_ms": ort_ms,
               "max_rel_error": max(o["max_rel"] for o in r["outputs"].values()),
               "agree": all(o["passed"] for o in r["outputs"].values())}
        if k == 0 and generic:
            row.update(static_first_ms=static_first_ms, ort_first_ms=ort_first_ms)
        rows.append(row)
        log(f"  {str(shape):22s} first {first_ms:9.1f} ms   generic " +
            (f"{row['generic_ms']:8.2f} ms ({row['generic_ms'] / ort_ms:.2f}x)" if generic else
             f"{'-':>19s}") +
            f"   specialized {row['specialized_ms']:8.2f} ms ({row['specialized_ms'] / ort_ms:.2f}x)"
            f"   onnxruntime {ort_ms:8.2f} ms" + ("" if row["agree"] else
                                                f"   DISAGREES (max rel error {row['max_rel_error']:.1e})"))
    return rows


def check_folder(folder: Path, batches: list[int], threads: int, log) -> list[dict]:
    """--check: one row per model of `folder` (see the module docstring)."""
    import onnxruntime as ort
    declared = json.loads((folder / "wild.json").read_text()) if (folder / "wild.json").is_file() else {}
    rows = []
    for path in sorted(folder.glob("*.onnx")):
        model = onnx.load(str(path))
        inputs = graph_inputs(model)
        free = with_free_dims(model, {v.name: {0: "batch"} for v in inputs + list(model.graph.output)})
        given = declared.get(path.stem, {}).get("inputs", {})
        shapes = {v.name: (None,) + tuple(given.get(v.name, [d.dim_value for d in v.type.tensor_type.shape.dim])[1:])
                  for v in inputs}
        row = {"model": path.stem}
        try:
            sess = compile_model(free, input_shapes=shapes, num_threads=threads, cache=False)
        except Exception as e:  # noqa: BLE001 (reported in the row)
            row["error"] = str(e).splitlines()[0]
            rows.append(row)
            log(f"{path.stem:22s} compile failed: {row['error'][:150]}")
            continue
        tier = sess.generic_tier or {}
        if "batch" not in tier and not tier.get("kind"):
            row["no_generic_tier"] = tier.get("none", "specialize='eager'")
            rows.append(row)
            log(f"{path.stem:22s} no generic tier: {row['no_generic_tier'][:150]}")
            continue
        options = ort.SessionOptions()
        options.log_severity_level = 3
        reference = ort.InferenceSession(free.SerializeToString(), options)
        row.update(generic_tier="batch 1 item by item" if "batch" in tier else tier["kind"], first_ms=[],
                   max_rel_error=0.0)
        for b in batches:
            feed = random_feed(free, {v.name: (b,) + shapes[v.name][1:] for v in inputs}, b)
            t = time.perf_counter()
            ours = sess.run(None, feed)
            row["first_ms"].append((time.perf_counter() - t) * 1e3)
            for got, want in zip(ours, reference.run(None, feed)):
                row["max_rel_error"] = max(row["max_rel_error"], relative_error(got, want))
        rows.append(row)
        log(f"{path.stem:22s} generic tier ({row['generic_tier']}); batches {batches}: first calls "
            f"{', '.join(f'{v:.1f}' for v in row['first_ms'])} ms, max rel error {row['max_rel_error']:.1e}")
    return rows


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def summary(rows: list[dict]) -> dict:
    """Geomeans against onnxruntime; the worst first call of a new shape on a session in use (every shape but the
    first) over its steady time; the session's first call over its steady time, beside a static compile's and a
    new onnxruntime session's first call over theirs (every engine's first call finds cold caches)."""
    steady = [r["generic_ms"] or r["specialized_ms"] for r in rows]
    in_use = list(zip(rows, steady))[1:] or list(zip(rows, steady))
    first = rows[0]
    out = {"generic_vs_ort": geomean([r["generic_ms"] / r["ort_ms"] for r in rows if r["generic_ms"]]),
           "specialized_vs_ort": geomean([r["specialized_ms"] / r["ort_ms"] for r in rows]),
           "worst_first_vs_steady": max(r["first_ms"] / s for r, s in in_use),
           "session_first_vs_steady": first["first_ms"] / steady[0]}
    if "static_first_ms" in first:
        out.update(static_first_vs_steady=first["static_first_ms"] / first["specialized_ms"],
                   ort_first_vs_steady=first["ort_first_ms"] / first["ort_ms"])
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m relayish_tools.bench.dynamic", description=__doc__.split("\n\n")[0])
    p.add_argument("model", nargs="?", default="models/resnet18.onnx")
    p.add_argument("--batches", default="1,2,3,4,6,8,12,16")
    p.add_argument("--images", default="96,128,160,192,224,256,288,320,384,448",
                   help="the CNN's image sides (square images, height and width free)")
    p.add_argument("--bert", metavar="FILE", help="the suite's BERT (python -m models bert), over --lengths")
    p.add_argument("--lengths", default="8,16,24,32,40,48,64,77,96,100,128,160,192,256,320,384")
    p.add_argument("--wild", metavar="DIR", help="the real-world suite's folder (ppocr_v6_rec.onnx, ppocr_v6_det.onnx)")
    p.add_argument("--widths", default="160,240,320,480,640")
    p.add_argument("--sides", default="320,352,416,480,512,576,640,736,800,960")
    p.add_argument("--captcha-widths", default="96,128,160,200,256,320",
                   help="ddddocr's widths (its LSTM recognizer, with --wild when the folder has it)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeat", type=int, default=30)
    p.add_argument("--json", metavar="FILE")
    p.add_argument("--check", metavar="DIR", nargs="+", help="check every model of these folders (see above)")
    args = p.parse_args(argv)
    if args.check:
        batches = [int(v) for v in (args.batches if args.batches != p.get_default("batches") else "2,3,5").split(",")]
        rows = [r for d in args.check for r in check_folder(Path(d), batches, args.threads,
                                                           lambda line: print(line, flush=True))]
        generic = [r for r in rows if "first_ms" in r]
        print(f"{len(generic)} of {len(rows)} models have a generic tier; largest error "
              f"{max((r['max_rel_error'] for r in generic), default=0.0):.1e}")
        if args.json:
            Path(args.json).write_text(json.dumps({"benchmark": "dynamic_check", "rows": rows}, indent=1))
        return 0
    path = Path(args.model)
    if not path.is_file():
        print(f"{path}: no such model (python -m models builds models/resnet18.onnx)", file=sys.stderr)
        return 2
    cases = [batch_case(path, [int(v) for v in args.batches.split(",")]),
             side_case(path, [int(v) for v in args.images.split(",")])]
    if args.bert:
        if not Path(args.bert).is_file():
            print(f"{args.bert}: no such model (python -m models bert)", file=sys.stderr)
            return 2
        cases.append(length_case(Path(args.bert), [int(v) for v in args.lengths.split(",")]))
    if args.wild:
        rec, det = Path(args.wild) / "ppocr_v6_rec.onnx", Path(args.wild) / "ppocr_v6_det.onnx"
        for needed in (rec, det):
            if not needed.is_file():
                print(f"{needed}: not found (python -m models --wild)", file=sys.stderr)
                return 2
        cases.append(width_case(rec, [int(v) for v in args.widths.split(",")]))
        cases.append(side_case(det, [int(v) for v in args.sides.split(",")]))
        captcha = Path(args.wild) / "ddddocr.onnx"  # an LSTM recognizer, when the folder has it
        if captcha.is_file():
            cases.append(width_case(captcha, [int(v) for v in args.captcha_widths.split(",")]))
    command = "python -m relayish_tools.bench.dynamic " + " ".join(argv if argv is not None else sys.argv[1:])
    report = {"benchmark": "dynamic", **provenance(command.strip()),
              "threads": args.threads, "repeat": args.repeat, "cases": []}
    for case in cases:
        rows = run_case(case, args.threads, args.repeat, lambda line: print(line, flush=True))
        s = summary(rows)
        generic = f"{s['generic_vs_ort']:.2f}x" if s["generic_vs_ort"] else "- (no generic tier)"
        cold = (f" (a static compile's {s['static_first_vs_steady']:.1f}x, onnxruntime's "
                f"{s['ort_first_vs_steady']:.1f}x)" if "static_first_vs_steady" in s else "")
        print(f"  geomean generic/onnxruntime {generic}, specialized/onnxruntime "
              f"{s['specialized_vs_ort']:.2f}x; a new shape's first call / steady: worst "
              f"{s['worst_first_vs_steady']:.1f}x; the session's first call / steady "
              f"{s['session_first_vs_steady']:.1f}x{cold}", flush=True)
        report["cases"].append({"model": case["name"], "rows": rows, "summary": s})
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
