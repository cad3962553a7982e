"""Every model of some folders compiled once with a dim left free, then run at sizes it was never compiled for and
checked against onnxruntime: what a user of a dynamic-shape model does.

    python -m relayish_tools.bench.free_dims DIR [DIR ...] [--models a,b] [--threads 2] [--json FILE]

Which dims: every dim a model leaves unbound (a dim_param, an unnamed dim), one at a time (dims with one name are
one dim); a model that binds every dim gets the dims a user would vary: dim 0 of every input (the batch), the
spatial dims of a 4-D float input (2 and 3), the length of a 3-D float input (2) and of a 2-D integer input (1).
Inputs whose sizes agree at that axis vary together (BERT's input_ids and attention_mask). The other dims keep
their base size: the folder's wild.json, else the model's declared dims.

Sizes: the first three of half the base, the base - 1, the base + 7, 1.5x the base, the base - 32, + 32 and + 64 (2,
3 and 5 for a base of 1 or 2) that onnxruntime itself accepts (an export may bake a size into a Reshape or a
classifier: onnxruntime refuses the others, and so may we); a dim no size of which onnxruntime runs is reported as
such. Inputs: N(0, 1) floats, integers in [0, 50), and an integer input named like a mask all 1 but its last quarter
(padding). Per size: the first call's time (the session has never seen the shape: it compiles it, or runs it on the
generic tier) and the largest error relative to the largest magnitude of each output. A model passes at <= 1e-4.
Where it does not, the model compiled statically for that shape is checked too: if the free-dim session gives the
static compile's outputs, or errs no more than it (row_status), the disagreement is the static compile's (an int8
model's rounding, see the int8 suite), not the free dim's."""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import onnx

from compiler import compile_model
from relayish_tools.bench.dynamic import graph_inputs, with_free_dims
from relayish_tools.bench.report import provenance
from runtime.accuracy import DEFAULT_TOLERANCE, relative_error

TOLERANCE = DEFAULT_TOLERANCE


def declared_dims(v) -> list:
    """A graph input's dims: an int, or its dim_param name, or None (unnamed, or a size <= 0)."""
    out = []
    for d in v.type.tensor_type.shape.dim:
        if d.HasField("dim_value") and d.dim_value > 0:
            out.append(int(d.dim_value))
        else:
            out.append(d.dim_param or None)
    return out


def free_dim_groups(model: onnx.ModelProto, base: dict[str, tuple]) -> list[dict]:
    """The dims to free, each as {"symbol", "axes": [(input, axis)], "base": size} (see the module docstring)."""
    inputs = graph_inputs(model)
    groups: dict[str, dict] = {}
    for v in inputs:
        for axis, d in enumerate(declared_dims(v)):
            if isinstance(d, int):
                continue
            symbol = d if d and d != "?" else f"{v.name}.{axis}"  # paddle2onnx writes "?" for unnamed
            g = groups.setdefault(symbol, {"symbol": symbol, "axes": [], "base": base[v.name][axis]})
            g["axes"].append((v.name, axis))
    if groups:
        return list(groups.values())
    natural = []
    for v in inputs:
        rank, floating = len(base[v.name]), v.type.tensor_type.elem_type in (onnx.TensorProto.FLOAT,
                                                                              onnx.TensorProto.FLOAT16)
        axes = [0] + ([2, 3] if rank == 4 and floating else [2] if rank == 3 and floating else
                      [1] if rank == 2 and not floating else [])
        natural += [(v.name, a, base[v.name][a]) for a in axes if a < rank]
    for name, axis, size in natural:
        symbol = "batch" if axis == 0 else f"dim{axis}_{size}"
        g = groups.setdefault(symbol, {"symbol": symbol, "axes": [], "base": size})
        if g["base"] == size:
            g["axes"].append((name, axis))
    return list(groups.values())


def with_free_axes(model: onnx.ModelProto, group: dict) -> onnx.ModelProto:
    """A copy of model whose inputs have the group's axes as one dim_param (their other dims as declared) and whose
    outputs' sizes are left to follow (every output dim unnamed)."""
    dims: dict[str, dict[int, str]] = {}
    for name, axis in group["axes"]:
        dims.setdefault(name, {})[axis] = group["symbol"]
    return with_free_dims(model, dims)


def candidate_sizes(base: int) -> list[int]:
    if base <= 2:
        return [2, 3, 5]
    sizes = []
    for s in (base // 2, base - 1, base + 7, base * 3 // 2, base - 32, base + 32, base + 64):
        if s >= 1 and s != base and s not in sizes:
            sizes.append(s)
    return sizes


def random_feed(v, shape: tuple, rng) -> np.ndarray:
    dtype = onnx.helper.tensor_dtype_to_np_dtype(v.type.tensor_type.elem_type)
    if np.issubdtype(dtype, np.floating):
        return rng.standard_normal(shape).astype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(dtype)
    if "mask" in v.name.lower():  # an attention mask: 1 = attend; the last quarter of the positions padded
        mask = np.ones(shape, dtype)
        if mask.ndim:
            mask[..., mask.shape[-1] - mask.shape[-1] // 4:] = 0
        return mask
    return rng.integers(0, 50, shape).astype(dtype)


def check_group(model: onnx.ModelProto, base: dict[str, tuple], group: dict, threads: int, log) -> dict:
    """Compile model once with group's dim free; run it at up to three sizes onnxruntime accepts."""
    import onnxruntime as ort
    free = with_free_axes(model, group)
    inputs = graph_inputs(free)
    row = {"dim": group["symbol"], "axes": [list(a) for a in group["axes"]], "base": group["base"], "sizes": []}
    shapes = {v.name: tuple(None if (v.name, a) in group["axes"] else s for a, s in enumerate(base[v.name]))
              for v in inputs}
    options = ort.SessionOptions()
    options.log_severity_level = 4  # a size the export does not allow is an error onnxruntime would log
    options.intra_op_num_threads = threads
    try:
        reference = ort.InferenceSession(free.SerializeToString(), options)
    except Exception as e:  # noqa: BLE001 (reported in the row)
        row["ort_error"] = str(e).splitlines()[0]
        return row
    try:
        t = time.perf_counter()
        sess = compile_model(free, input_shapes=shapes, num_threads=threads, cache=False)
        row["compile_s"] = time.perf_counter() - t
    except Exception as e:  # noqa: BLE001 (reported in the row)
        row["error"] = f"compile_model: {str(e).splitlines()[0]}"
        return row
    row["generic_tier"] = getattr(sess, "generic_tier", None)
    refused = []
    for size in candidate_sizes(group["base"]):
        if len(row["sizes"]) == 3:
            break
        rng = np.random.default_rng(size)
        feed = {v.name: random_feed(v, tuple(size if s is None else s for s in shapes[v.name]), rng)
                for v in inputs}
        try:
            want = reference.run(None, feed)
        except Exception:  # noqa: BLE001 (a size the export does not allow)
            refused.append(size)
            continue
        entry = {"size": size}
        if not all(np.isfinite(w).any() for w in want if w.size and w.dtype.kind == "f"):
            entry["error"] = "an output of onnxruntime has no finite value on these inputs: nothing to compare"
            row["sizes"].append(entry)
            continue
        try:
            t = time.perf_counter()
            got = sess.run(None, feed)
            entry["first_ms"] = (time.perf_counter() - t) * 1e3
            entry["max_rel_error"] = max((relative_error(g, w) for g, w in zip(got, want)), default=0.0)
            if entry["max_rel_error"] > TOLERANCE:  # is it the free dim, or does the static compile disagree too?
                static = compile_model(free, input_shapes={k: f.shape for k, f in feed.items()},
                                       num_threads=threads, cache=False).run(None, feed)
                entry["static_rel_error"] = max(relative_error(g, w) for g, w in zip(static, want))
                entry["vs_static"] = max(relative_error(g, w) for g, w in zip(got, static))
        except Exception as e:  # noqa: BLE001 (reported in the row)
            entry["error"] = str(e).splitlines()[0]
        row["sizes"].append(entry)
    if refused:
        row["ort_refused"] = refused
    return row


AS_STATIC = 1.5  # an error this many times the static compile's, where that disagrees too, is the static one's


def row_status(row: dict) -> str:
    """"pass" (every size within TOLERANCE of onnxruntime), "as static" (where not, the static compile for that
    shape disagrees too, and the free dim's outputs are the static compile's to 1e-6 or no further from
    onnxruntime than AS_STATIC times it: a dynamically quantized model, whose activations' rounding to int8
    flips on the last bit of a float sum, agrees with onnxruntime only to its quantization steps, static or not,
    tests/test_models_quantized.py), "fail", or "error" (nothing checked)."""
    sizes = row["sizes"]
    if not sizes or "error" in row or any("error" in e for e in sizes):
        return "error"
    if all(e["max_rel_error"] <= TOLERANCE for e in sizes):
        return "pass"
    if all(e["max_rel_error"] <= TOLERANCE or e.get("vs_static", float("inf")) <= 1e-6 or
           TOLERANCE < e.get("static_rel_error", 0.0) and e["max_rel_error"] <= AS_STATIC * e["static_rel_error"]
           for e in sizes):
        return "as static"
    return "fail"


def show_row(model: str, row: dict) -> str:
    head = f"{model:22s} {row['dim']:>22s} (base {row['base']}): "
    if "ort_error" in row or "error" in row:
        return head + "ERROR " + row.get("error", f"onnxruntime: {row.get('ort_error')}")[:160]
    if not row["sizes"]:
        return head + f"onnxruntime runs none of {row.get('ort_refused')}"
    parts = []
    for e in row["sizes"]:
        parts.append(f"{e['size']}: " + (f"ERROR {e['error'][:120]}" if "error" in e else
                                         f"{e['max_rel_error']:.1e} in {e['first_ms']:.0f} ms") +
                     (f" (static compile {e['static_rel_error']:.1e}, free vs static {e['vs_static']:.1e})"
                      if "vs_static" in e else ""))
    return head + f"{row_status(row).upper():10s}" + "; ".join(parts)


def check_folder(folder: Path, only: set | None, threads: int, log) -> list[dict]:
    declared = json.loads((folder / "wild.json").read_text()) if (folder / "wild.json").is_file() else {}
    rows = []
    for path in sorted(folder.glob("*.onnx")):
        if only and path.stem not in only:
            continue
        model = onnx.load(str(path))
        given = declared.get(path.stem, {}).get("inputs", {})
        base, missing = {}, []
        for v in graph_inputs(model):
            dims = given.get(v.name) or declared_dims(v)
            if not all(isinstance(d, int) for d in dims):
                missing.append(v.name)
            base[v.name] = tuple(dims)
        if missing:
            log(f"{path.stem:22s} skipped: no base size for the free dims of {missing} (give them in wild.json)")
            continue
        for group in free_dim_groups(model, base):
            row = {"model": path.stem, **check_group(model, base, group, threads, log)}
            rows.append(row)
            log(show_row(path.stem, row))
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m relayish_tools.bench.free_dims", description=__doc__.split("\n\n")[0])
    p.add_argument("folders", nargs="+", metavar="DIR")
    p.add_argument("--models", help="only these models (comma-separated file stems)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args(argv)
    for d in args.folders:
        if not Path(d).is_dir():
            print(f"{d}: no such folder", file=sys.stderr)
            return 2
    only = set(args.models.split(",")) if args.models else None
    rows = [r for d in args.folders for r in check_folder(Path(d), only, args.threads,
                                                          lambda line: print(line, flush=True))]
    status = [row_status(r) for r in rows if r["sizes"] or "error" in r]
    print(f"{len(rows)} free dims: {status.count('pass')} pass at every size onnxruntime runs, "
          f"{status.count('as static')} err as the static compile does where that disagrees, "
          f"{status.count('fail')} fail, {status.count('error')} errors; "
          f"{len(rows) - len(status)} onnxruntime runs at no size but the base")
    if args.json:
        command = "python -m relayish_tools.bench.free_dims " + " ".join(argv if argv is not None else sys.argv[1:])
        Path(args.json).write_text(json.dumps({"benchmark": "free_dims", **provenance(command.strip()),
                                               "tolerance": TOLERANCE, "rows": rows}, indent=1))
    return 0 if status.count("fail") + status.count("error") == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
