"""Models compiled with dims left free: a generic tier that runs any shape at once where it can, and modules
specialized to the shapes that recur.

`compile_model(path, input_shapes={"x": (1, 3, 48, None)})` leaves dim 3 of x free: None or -1 for any size,
`(lo, hi)` for a size in that closed range. Every other dim the model leaves unbound (a dim_param name or an
unnamed dim of any input not fixed by input_shapes) is free too. compile_model then returns a
ShapeSpecializedSession: its `run` checks every input against the model's fixed dims, the free dims' ranges and
each other (a dim named `batch` in two inputs must have one size) and runs the call on

- the **specialized tier**: a module compiled for exactly these sizes (as fast as a static compile), when one is
  kept; else
- the **generic tier**, where the model has one, made by compile_model itself, so that a shape never seen runs at
  once, no compile: a model whose only free dim is the batch (dim 0 of every input) and whose ops keep the items
  of a batch apart (compiler/batch_split.py) runs any batch item by item on one module compiled for batch 1; any
  other model that compiles with its free dims as run-time sizes runs on kernels with run-time extents
  (compiler/generic.py: one library for every size);
- else a module compiled now, on this call, for these sizes.

`specialize` says when the specialized tier is made: "auto" (the default) compiles a shape's module in a
background thread once the shape has come SPECIALIZE_AFTER times, the generic tier serving it meanwhile, and swaps
it in between calls (a model without a generic tier compiles on first sight, as "eager"); "eager" compiles on first
sight, in the call; "never" runs the generic tier only (refused for a model without one). The batch-1 module is
also the specialization of batch 1. Tuning records apply to every module as to a static compile: the batch
tier's kernels are the batch-1 model's, the specialized tier's those of each shape; the kernels with run-time
extents run their default schedules (made for a typical size, compiler/generic.py).

What the run-time extents do not cover yet (such a model compiles per shape, generic_tier["none"] says why):
shape arithmetic over the free dims that cannot be decided at import (frontends/onnx/shape_values.py), Resize of
a free dim other than nearest by a whole scale, a pool in ceil mode whose last window may be dropped, a recurrent
layer over a free length outside its fused form (clip, peepholes, other activations, sequence_lens, quantized
weights that are not constants). Sizes that break what the import assumed (an intermediate dim smaller than 1, a
window larger than its input that onnxruntime clips, a slice past its table, two dims a feature pyramid adds that
differ) are compiled per shape by a model that has the tier (compiler/generic.py SizesOutsideGeneric).

Invariants:
- A specialized module is chosen by the sizes of every free dim: it is never reused for another shape, so results
  are those of a model compiled for the shapes given. The generic tier's results are the batch-1 model's, item by
  item (within float rounding of the specialized module's).
- At most `max_specializations` modules are kept besides the generic tier's batch-1 module, which is always kept
  (least recently used dropped): memory stays bounded when shapes change from call to call.
- Thread-safe: concurrent calls with one new shape compile it once (the others wait, or run on the generic tier),
  then each runs on the compiled module, which is itself safe to call from several threads; a module compiled in
  the background is swapped in under the session's lock, between calls.
- A background compile that fails leaves that shape on the generic tier; `specializations()` says why.
"""
from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from runtime.session import ORT_TYPES, PROVIDER, ModelMetadata, NodeArg, model_metadata

from .free_dims import bind, input_specs
from .generic import GenericUnsupported, compile_generic
from .generic_module import SizesOutsideGeneric

MAX_SPECIALIZATIONS = 8
SESSION_FORMAT = "relayish-dynamic-session/1"  # session.json's format (export / load_session)
RUN_TIME_EXTENTS = "run-time extents"  # generic_tier["kind"] of a generic module (compiler/generic.py)
SPECIALIZE_AFTER = 2  # calls with one shape after which "auto" compiles a module for it in the background


def describe_generic_tier(tier: dict | None) -> str:
    """What serves a shape no module was compiled for, in words (the CLI's reports)."""
    tier = tier or {}
    if "batch" in tier:
        return f"any {tier['batch']} on the batch-1 module"
    if tier.get("kind") == RUN_TIME_EXTENTS:
        sized = f"outputs sized by data ({', '.join(tier['data_sized'])})" if tier.get("data_sized") else ""
        return f"any {', '.join(tier['symbols'] + ([sized] if sized else []))} on kernels with run-time extents" \
            if tier["symbols"] else f"{sized} on kernels with run-time extents"
    return f"none ({tier.get('none', 'specialize=eager')}): a new shape compiles in its first call"


def _key(sizes: dict) -> tuple:
    """The key of a module: its free symbols' sizes, in a fixed order."""
    return tuple(sorted(sizes.items()))


def _int_shapes(shapes: dict) -> dict:
    return {n: tuple(int(v) for v in s) for n, s in shapes.items()}


@dataclass
class Specialization:
    """One compiled module and what it was compiled for."""
    module: object
    symbols: dict
    input_shapes: dict
    compile_s: float
    runs: int = 0
    background: bool = False


class ShapeSpecializedSession:
    """A session over a model compiled with free dims (see the module docstring). The onnxruntime-like API (run,
    get_inputs, get_outputs, get_modelmeta, get_providers) answers for every shape; anything else (benchmark,
    profile, export_library) belongs to one shape's module: `specialization(input_shapes)`."""

    def __init__(self, model, options, compile_with, described: dict, max_specializations: int = MAX_SPECIALIZATIONS,
                 restored: dict | None = None):
        """options: the compile's compiler.options.CompileOptions, whose input_shapes leave dims free;
        compile_with(model, options): the compiler (handed in: compile.py imports this module); restored: the
        tiers of an exported session (restore_session), which are then neither analysed nor compiled again."""
        if not isinstance(max_specializations, int) or max_specializations < 1:
            raise ValueError(f"max_specializations must be a positive int, got {max_specializations!r}")
        self._model = model
        self._specs = input_specs(described["input_dims"], options.input_shapes)
        self._options = options
        self._compile = compile_with
        self._described = described
        self._capacity = max_specializations
        self._kept: OrderedDict = OrderedDict()  # symbol sizes -> Specialization
        self._lock = threading.Lock()
        self._seen: dict = {}  # symbol sizes -> calls the generic tier served
        self._pending: set = set()  # symbol sizes being compiled in the background
        self._failed: dict = {}  # symbol sizes -> why their background compile failed
        self._background: threading.Thread | None = None
        self._queue: list = []
        self._batch, self.generic_tier, self._out_axes = None, None, ()
        self._extents = None  # the generic tier with run-time extents (compiler/generic.py), if it is that
        self._last = None  # the module the last call ran on (_on)
        if restored is not None:
            self._batch, self.generic_tier = restored["batch"], restored["generic_tier"]
            self._out_axes = tuple(restored.get("out_axes", ()))
            for key, spec in restored["modules"]:
                self._kept[key] = spec
            if self._batch is not None:
                self._generic = self._kept[_key({self._batch: 1})].module
            elif (self.generic_tier or {}).get("kind") == RUN_TIME_EXTENTS:
                why_not = self._make_extents() if model is not None else "the session was loaded without its model"
                if why_not is not None:
                    self.generic_tier = {"none": why_not}
        elif options.specialize != "eager":
            self._batch, why = self._batch_symbol()
            if self._batch is not None:
                self._make_generic()
            else:
                why_not = self._make_extents()
                if why_not is not None and options.specialize == "never":
                    raise ValueError(f"specialize='never' needs a generic tier, and this model has none: {why}; "
                                     f"{why_not}")
                if why_not is not None:
                    self.generic_tier = {"none": f"{why}; {why_not}"}

    @property
    def free_dims(self) -> dict[str, str]:
        """Each free symbol and where it is declared (its range if it has one)."""
        out = {}
        for name, dims in self._specs.items():
            for axis, d in enumerate(dims):
                if d.symbol is not None:
                    out.setdefault(d.symbol, f"{name} dim {axis}" + ("" if d.show() == d.symbol else
                                                                      d.show()[len(d.symbol):]))
        return out

    def specializations(self) -> list[dict]:
        """The compiled modules kept, least recently used first (symbol sizes, input shapes, compile seconds, the
        runs each has served, "background" if compiled off the call path), then the shapes being compiled
        ("pending") and those whose background compile failed ("failed": why)."""
        with self._lock:
            kept = [{"symbols": dict(s.symbols), "input_shapes": dict(s.input_shapes), "compile_s": s.compile_s,
                     "runs": s.runs, "background": s.background} for s in self._kept.values()]
            return kept + [{"symbols": dict(k), "pending": True} for k in sorted(self._pending)] + \
                [{"symbols": dict(k), "failed": why} for k, why in sorted(self._failed.items())]

    def wait_for_specializations(self, timeout: float | None = None) -> bool:
        """Block until no background compile is queued or running (True), or `timeout` seconds pass (False)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                if not self._pending:
                    return True
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(0.01)

    # ---- onnxruntime's InferenceSession API ----
    def get_inputs(self) -> list[NodeArg]:
        types = self._described["input_types"]
        return [NodeArg(name, [d.size if d.size is not None else d.symbol for d in dims],
                        ORT_TYPES.get(types.get(name) or "", "tensor(?)")) for name, dims in self._specs.items()]

    def get_outputs(self) -> list[NodeArg]:
        dims, types = self._described["output_dims"], self._described["output_types"]
        return [NodeArg(name, list(d) if d is not None else None, ORT_TYPES.get(types.get(name) or "", "tensor(?)"))
                for name, d in dims.items()]

    def get_modelmeta(self) -> ModelMetadata:
        return model_metadata(self._described, "the model")

    def get_providers(self) -> list[str]:
        return [PROVIDER]

    def run(self, output_names, input_feed: dict, run_options=None) -> list[np.ndarray]:
        if not isinstance(input_feed, dict):
            raise TypeError(f"input_feed must be a dict of input name -> array, got {type(input_feed).__name__}")
        shapes = {name: np.shape(input_feed[name]) for name in self._specs if name in input_feed}
        if self._batch is None and self._extents is None:
            spec = self._specialization_for(shapes, count_run=True)
            return self._on(spec.module).run(output_names, input_feed, run_options)
        key = _key(bind(self._specs, shapes))
        with self._lock:
            spec = self._kept.get(key)
            if spec is not None:
                self._kept.move_to_end(key)
                spec.runs += 1
            elif self._options.specialize == "auto" and key not in self._pending and key not in self._failed:
                self._seen[key] = self._seen.get(key, 0) + 1
                if self._seen[key] >= SPECIALIZE_AFTER:
                    self._schedule(key, _int_shapes(shapes))
        if spec is not None:
            return self._on(spec.module).run(output_names, input_feed, run_options)
        if self._extents is not None:
            try:
                return self._on(self._extents).run(output_names, input_feed, run_options)
            except SizesOutsideGeneric:  # (a window larger than its input: compiled for these sizes, as it was)
                spec = self._specialization_for(shapes, count_run=True)
                return self._on(spec.module).run(output_names, input_feed, run_options)
        return self._run_generic(output_names, input_feed, run_options, dict(key)[self._batch])

    def run_generic(self, output_names, input_feed: dict, run_options=None) -> list[np.ndarray]:
        """Run this call on the generic tier whatever is specialized (its results are the specialized tier's,
        bench.dynamic times the tiers side by side with it); ValueError if the session has no generic tier. Not
        counted toward specializing the shape."""
        if self._batch is None and self._extents is None:
            raise ValueError(f"this session has no generic tier: {describe_generic_tier(self.generic_tier)}")
        if not isinstance(input_feed, dict):
            raise TypeError(f"input_feed must be a dict of input name -> array, got {type(input_feed).__name__}")
        if self._extents is not None:
            return self._on(self._extents).run(output_names, input_feed, run_options)
        shapes = {name: np.shape(input_feed[name]) for name in self._specs if name in input_feed}
        return self._run_generic(output_names, input_feed, run_options, bind(self._specs, shapes)[self._batch])

    def _on(self, module):
        """module, the previous call's module idled first if it was another: each library has its own thread
        pool, whose workers spin a moment after a run; the next library's would share the cores with them."""
        last, self._last = self._last, module
        if last is not None and last is not module and hasattr(last, "idle"):
            last.idle()
        return module

    def specialization(self, input_shapes: dict):
        """The compiled module for these input shapes (name -> shape), compiled now if it is not kept."""
        return self._specialization_for({k: tuple(v) for k, v in input_shapes.items()}).module

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        raise AttributeError(f"{name!r}: this session compiles the model once per shape of its free dims "
                             f"{sorted(self.free_dims)}; ask one shape's module: "
                             f"sess.specialization({{input name: shape, ...}}).{name}")

    def __repr__(self):
        return (f"ShapeSpecializedSession(free_dims={self.free_dims}, specializations={len(self._kept)}, "
                f"generic_tier={self.generic_tier})")

    def export(self, folder: str) -> str:
        """Write the session to `folder` (created if needed): every kept module as a library (runtime.Module.
        export_library: m<k>.so with its .json and .params) and session.json, which says what each was compiled
        for, the free dims and the generic tier. compiler.load_session(folder) reads it back without compiling.
        Returns the folder's absolute path."""
        import json
        import os
        os.makedirs(folder, exist_ok=True)
        with self._lock:
            kept = list(self._kept.items())
        modules = []
        for k, (key, spec) in enumerate(kept):
            spec.module.export_library(os.path.join(folder, f"m{k}.so"))
            modules.append({"file": f"m{k}.so", "symbols": dict(key), "compile_s": spec.compile_s,
                            "input_shapes": {n: list(v) for n, v in spec.input_shapes.items()}})
        manifest = {"format": SESSION_FORMAT, "described": self._described,
                    "input_shapes": {n: [list(d) if isinstance(d, tuple) else d for d in dims]
                                     for n, dims in self._options.input_shapes.items()},
                    "specialize": self._options.specialize, "max_specializations": self._capacity,
                    "batch": self._batch, "out_axes": list(self._out_axes), "generic_tier": self.generic_tier,
                    "modules": modules}
        tmp = os.path.join(folder, "session.json.tmp")
        with open(tmp, "w") as f:
            json.dump(manifest, f, indent=1)
        os.replace(tmp, os.path.join(folder, "session.json"))
        return os.path.abspath(folder)

    # ---- the generic tier ----
    def _batch_symbol(self) -> tuple[str | None, str]:
        """(the batch symbol, "") when the model has a generic tier (see compiler/batch_split.py), else (None,
        why not)."""
        from frontends import from_onnx
        from .batch_split import BATCH, NotSeparable, batch_axis_of_outputs
        symbols = {d.symbol for dims in self._specs.values() for d in dims if d.symbol is not None}
        first = {dims[0].symbol if dims else None for dims in self._specs.values()}
        if len(symbols) != 1 or first != symbols or \
                any(d.symbol is not None for dims in self._specs.values() for d in dims[1:]):
            return None, (f"free dims {sorted(self.free_dims)} are not a batch alone (dim 0 of every input, one "
                          f"symbol)")
        shapes = {n: (BATCH,) + tuple(d.size for d in dims[1:]) for n, dims in self._specs.items()}
        try:
            one = {n: (1,) + shape[1:] for n, shape in shapes.items()}
            axes = batch_axis_of_outputs(from_onnx(self._model, input_shapes=shapes),
                                         from_onnx(self._model, input_shapes=one))
        except NotSeparable as e:
            return None, f"its batch items are not computed apart: {e}"
        except Exception as e:  # the model cannot even be imported at batch 2 (a reshape to batch 1)
            return None, f"it does not import at batch {BATCH}: {str(e).splitlines()[0]}"
        self._out_axes = axes
        return symbols.pop(), ""

    def _make_extents(self) -> str | None:
        """Make the generic tier with run-time extents (compiler/generic.py); None, or why the model has none."""
        shapes = {n: tuple(d.symbol if d.symbol is not None else d.size for d in dims)
                  for n, dims in self._specs.items()}
        ranges = {d.symbol: (d.lo, d.hi) for dims in self._specs.values() for d in dims if d.symbol is not None}
        try:
            self._extents = compile_generic(self._model, shapes, self._options, list(self._described["output_dims"]),
                                            ranges)
        except GenericUnsupported as e:
            return f"no kernels with run-time extents: {e}"
        if self._options.num_threads is not None:
            self._extents.num_threads = self._options.num_threads
        self.generic_tier = {"kind": RUN_TIME_EXTENTS, "symbols": sorted(self.free_dims),
                             "compile_s": round(self._extents.compile_s, 2)}
        if self._extents.data_sized:  # outputs sized by data: no shape has a static compile to specialize to
            self.generic_tier["data_sized"] = self._extents.data_sized
            self._options = self._options.replace(specialize="never")
        return None

    def _make_generic(self) -> None:
        sizes = {self._batch: 1}
        shapes = {n: tuple(1 if d.symbol is not None else d.size for d in dims) for n, dims in self._specs.items()}
        spec = self._compile_for(sizes, shapes)
        self._generic = spec.module
        self._kept[_key(sizes)] = spec
        self.generic_tier = {"batch": self._batch, "module": "batch 1", "compile_s": spec.compile_s}

    def _run_generic(self, output_names, input_feed: dict, run_options, batch: int) -> list[np.ndarray]:
        """Item by item on the batch-1 module, each output's items joined along its batch axis (dim 0 of a
        classifier's logits, dim 1 of a sequence model's (T, B, C), dim 1 of a detector's (1, B x anchors, 6))."""
        names = list(self._specs)
        feeds = {n: np.asarray(input_feed[n]) for n in names}
        all_outputs = [o.name for o in self._generic.get_outputs()]
        wanted = all_outputs if output_names is None else list(output_names)
        axes = [self._out_axes[all_outputs.index(n)] if n in all_outputs else 0 for n in wanted]
        if batch == 0:
            item = {n: np.zeros((1,) + v.shape[1:], v.dtype) for n, v in feeds.items()}
            return [np.take(o, np.arange(0), axis=a) for o, a in
                    zip(self._generic.run(output_names, item, run_options), axes)]
        parts = [self._on(self._generic).run(output_names, {n: v[i:i + 1] for n, v in feeds.items()}, run_options)
                 for i in range(batch)]
        return [np.concatenate([p[k] for p in parts], axis=a) for k, a in enumerate(axes)]

    def _schedule(self, key: tuple, shapes: dict) -> None:
        """Queue a background compile of key's module (the lock held)."""
        self._pending.add(key)
        self._queue.append((key, shapes))
        if self._background is None or not self._background.is_alive():
            self._background = threading.Thread(target=self._compile_queued, name="relayish-specialize",
                                                daemon=True)
            self._background.start()

    def _compile_queued(self) -> None:
        while True:
            with self._lock:
                if not self._queue:
                    self._background = None
                    return
                key, shapes = self._queue.pop(0)
            try:
                spec = self._compile_for(dict(key), shapes)
                spec.background = True
            except Exception as e:  # the generic tier keeps serving this shape
                with self._lock:
                    self._failed[key] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                    self._pending.discard(key)
                continue
            with self._lock:
                self._insert(key, spec)
                self._pending.discard(key)
                self._seen.pop(key, None)

    # ---- internals ----
    def _insert(self, key: tuple, spec: Specialization) -> None:
        """Keep spec under key, dropping the least recently used beyond capacity (the generic tier's batch-1 module
        is neither counted nor dropped: with capacity 1, a module compiled in the background is kept)."""
        self._kept[key] = spec
        generic = _key({self._batch: 1}) if self._batch is not None else None
        while len(self._kept) - (generic in self._kept) > self._capacity:
            victim = next(k for k in self._kept if k != generic)
            del self._kept[victim]

    def _specialization_for(self, shapes: dict, count_run: bool = False) -> Specialization:
        sizes = bind(self._specs, shapes)
        key = _key(sizes)
        with self._lock:
            spec = self._kept.get(key)
            if spec is None:
                spec = self._compile_for(sizes, _int_shapes(shapes))
                self._insert(key, spec)
            self._kept.move_to_end(key)
            spec.runs += count_run
        return spec

    def _compile_for(self, sizes: dict, shapes: dict) -> Specialization:
        if self._compile is None:
            raise ValueError(f"input shapes {shapes}: this session was loaded (load_session) with no module for "
                             f"them and no model to compile one: load it with model=, or export it after running "
                             f"these shapes")
        t0 = time.perf_counter()
        try:
            module = self._compile(self._model, self._options.replace(input_shapes=shapes))
        except Exception as e:
            e.add_note(f"(compiling the model for input shapes {shapes})")
            raise
        return Specialization(module, sizes, shapes, time.perf_counter() - t0)


def restore_session(folder: str, model=None, compile_with=None, num_threads: int | None = None):
    """compiler.load_session's work (compile.py hands in the compiler): a session exported by
    ShapeSpecializedSession.export, its modules loaded (runtime.load_module checks each), the generic tier as it
    was. Shapes with no module run on the generic tier; where there is none, they are compiled from `model` (the
    ONNX model, as compile_model takes it) when it is given, else refused with an error. ValueError naming the
    file for a folder that does not hold an exported session."""
    import json
    import os

    from runtime.module import load_module

    from .options import CompileOptions
    path = os.path.join(folder, "session.json")
    try:
        with open(path) as f:
            manifest = json.load(f)
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file: {folder!r} holds no exported session") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != SESSION_FORMAT:
        raise ValueError(f"{path}: not a session of format {SESSION_FORMAT!r}")
    shapes = {n: tuple(tuple(d) if isinstance(d, list) else d for d in dims)
              for n, dims in manifest["input_shapes"].items()}
    options = CompileOptions(input_shapes=shapes, specialize=manifest["specialize"], num_threads=num_threads,
                             max_specializations=manifest["max_specializations"])
    modules = []
    for m in manifest["modules"]:
        module = load_module(os.path.join(folder, m["file"]))
        if num_threads is not None:
            module.num_threads = num_threads
        spec = Specialization(module, dict(m["symbols"]), {n: tuple(v) for n, v in m["input_shapes"].items()},
                              m["compile_s"])
        modules.append((_key(m["symbols"]), spec))
    return ShapeSpecializedSession(model, options, compile_with if model is not None else None, manifest["described"],
                                   manifest["max_specializations"],
                                   restored={"batch": manifest["batch"], "generic_tier": manifest["generic_tier"],
                                             "out_axes": manifest.get("out_axes", ()), "modules": modules})
