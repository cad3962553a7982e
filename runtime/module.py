"""Load a compiled library and run it: `Module` and `load_module`.

The native ABI (every buffer 64-byte aligned and C-contiguous, shapes and dtypes as in the metadata):

    void    relayish_run(i8** inputs, i8** outputs, i8* params, i8* workspace);
    void    relayish_run_profiled(i8** inputs, i8** outputs, i8* params, i8* workspace, int64* ns_per_kernel);
    void    relayish_set_num_threads(int32);
    int32   relayish_get_num_threads(void);

`inputs[i]` / `outputs[i]` follow the order of meta["inputs"] / meta["outputs"]; `ns_per_kernel[k]` receives the
nanoseconds of meta["kernels"][k]. The library never allocates its inputs, outputs, params or workspace: the Module
owns them. Everything is checked in Python before the one native call of an inference, because a wrong shape
reaching native code is a silent memory corruption, not an exception.
"""
from __future__ import annotations

import ctypes
import json
import math
import os
import shutil
import tempfile
import time
import weakref
from contextlib import contextmanager
from typing import NamedTuple

import numpy as np

from .aligned import ALIGNMENT, aligned_empty, as_aligned, data_address, packed_offsets
from .feeds import check_feed, numpy_dtype, output_indices, pick_outputs
from .integrity import (check_hash_entry, check_memory, content_hashes, physical_memory_bytes, verify_fields,
                        verify_file)
from .metadata import FileMissingError, LoadError, dump_metadata, read_metadata, validate_metadata
from .profiling import profile_rows, summarize_times
from .session import PROVIDER, check_run_options, model_metadata, node_args, tagged
from .target import check_target
from .workspaces import WorkspacePool

SMALL_OUTPUTS_BYTES = 32 << 10  # outputs up to this size in all are allocated one by one (Module._bind_outputs)
_PTR = ctypes.c_void_p  # the pointer tables too: run passes their addresses as ints, the cheapest conversion
# symbol -> (restype, argtypes) of the ABI above.
_ABI = {
    "relayish_run": (None, [_PTR, _PTR, _PTR, _PTR]),
    "relayish_run_profiled": (None, [_PTR, _PTR, _PTR, _PTR, ctypes.POINTER(ctypes.c_int64)]),
    "relayish_set_num_threads": (None, [ctypes.c_int32]),
    "relayish_get_num_threads": (ctypes.c_int32, []),
}
# realpath -> identity (dev, inode, size, mtime) of every library this process has dlopen'ed. dlopen returns the
# already-loaded object for a path it has seen, even if the file was replaced since, so a changed file is loaded
# from a private copy instead (see _open_library).
_LOADED: dict[str, tuple] = {}


class TensorSpec(NamedTuple):
    """One input or output of a compiled model."""
    name: str
    shape: tuple
    dtype: np.dtype
    index_bounds: tuple | None = None  # (lo, hi): an index input's values must be in [lo, hi); or one (lo, hi)
    # per position of its last axis
    index_ignored: int | None = None  # a value also allowed outside index_bounds (a loss's ignore_index)


def _bounds_tuple(bounds) -> tuple:
    """index_bounds of the metadata as tuples: (lo, hi) or ((lo, hi), ...)."""
    return tuple(tuple(b) if isinstance(b, (list, tuple)) else b for b in bounds)


def default_num_threads() -> int:
    """All the cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def default_max_concurrent_runs(meta: dict) -> int:
    """One overlapping call per core, as long as that many workspaces and the weights fit in physical memory."""
    cores, memory, workspace = default_num_threads(), physical_memory_bytes(), meta["workspace_bytes"]
    if memory is None or workspace == 0:
        return cores
    return max(1, min(cores, (memory - meta["params_bytes"]) // workspace))


def _file_identity(path: str) -> tuple:
    st = os.stat(path)
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def _open_library(lib_path: str, scratch_dir_factory) -> ctypes.CDLL:
    """dlopen `lib_path` with the ABI's signatures set; errors name the file.

    If this process already loaded a different file under the same path, load a private copy (made in the directory
    returned by `scratch_dir_factory()`) so that we really get the new code.
    """
    if not os.path.isfile(lib_path):
        raise FileMissingError(f"compiled library not found: {lib_path}")
    real = os.path.realpath(lib_path)
    identity = _file_identity(real)
    if _LOADED.setdefault(real, identity) != identity:
        copy = os.path.join(scratch_dir_factory(), os.path.basename(real))
        shutil.copyfile(real, copy)
        real = copy
    try:
        lib = ctypes.CDLL(real)
    except OSError as e:
        raise LoadError(f"cannot load compiled library {lib_path}: {e}") from None
    for symbol, (restype, argtypes) in _ABI.items():
        try:
            fn = getattr(lib, symbol)
        except AttributeError:
            raise LoadError(f"{lib_path} is not a relayish library: it does not export {symbol}") from None
        fn.restype, fn.argtypes = restype, argtypes
    return lib


def params_path(lib_path: str, meta: dict) -> str:
    """Where the weights of the library at `lib_path` are: meta["params_file"] (a bare file name, checked by
    validate_metadata) in the library's directory, or "<library file name>.params"."""
    name = meta.get("params_file", os.path.basename(lib_path) + ".params")
    return os.path.join(os.path.dirname(os.path.abspath(lib_path)), name)


def _read_params(path: str, nbytes: int) -> np.ndarray:
    """The weights file read once into an aligned uint8 buffer of exactly `nbytes`; errors name the file."""
    if nbytes == 0 and not os.path.exists(path):
        return aligned_empty(0, np.uint8)
    if not os.path.isfile(path):
        raise FileMissingError(f"params file not found: {path}")
    size = os.path.getsize(path)
    if size != nbytes:
        raise LoadError(f"corrupt params file {path}: it has {size} bytes, the metadata says {nbytes}")
    buf = aligned_empty(nbytes, np.uint8)
    with open(path, "rb") as f:
        if f.readinto(memoryview(buf)) != nbytes:
            raise LoadError(f"corrupt params file {path}: short read")
    return buf


def _replace_file(path: str, write) -> None:
    """Write a file through a temporary sibling and an atomic rename, so that a process that has the old file
    mapped (a loaded library) keeps a valid mapping instead of seeing it truncated under its feet."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path) or ".", prefix=".relayish-")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


class Module:
    """A compiled model, loaded and ready to run. Mirrors onnxruntime.InferenceSession's `run`.

    Owns: the CDLL (alive as long as the Module), the aligned params (read once), the workspaces of its calls, and
    optionally `owned_dir`, a temporary directory holding the library, deleted when the Module is collected or at
    interpreter exit. Modules loaded from the same library file share its native thread count (one dlopen handle).

    Thread-safe: `run`, `profile` and `benchmark` may be called from several threads at once, as onnxruntime's
    InferenceSession.run. Each running call holds its own workspace and argument arrays (runtime.workspaces), so
    calls overlap; the native thread pool serves one call's parallel loops at a time, and an overlapping call runs
    its loops on its own thread. `max_concurrent_runs` bounds how many calls run at once, hence how many workspaces
    are ever allocated (on demand, then reused); further calls wait. Its default is the number of cores of this
    process (more overlapping calls would only share the same cores, at the cost of one more workspace each), fewer
    if that many workspaces and the weights would not fit in physical memory.
    max_concurrent_runs = 1 serializes calls (one workspace, like a lock). Measured on ResNet-18 (the Limits section
    of docs/history/readme-2026-11-28.md), overlapping calls gave more throughput than serialized ones with 2 and 4
    calling threads, hence the default.
    Inputs are checked before a call waits or runs native code.
    """

    def __init__(self, lib_path: str, meta: dict, params: np.ndarray | None = None, *, owned_dir: str | None = None):
        self._finalizer = weakref.finalize(self, shutil.rmtree, owned_dir, True) if owned_dir else None
        self.lib_path = os.path.abspath(lib_path)
        validate_metadata(meta, f"the metadata of {lib_path}")
        check_memory(meta, f"the metadata of {lib_path}")
        check_target(meta["target"], lib_path)
        self._meta = meta
        self._inputs = [TensorSpec(t["name"], tuple(t["shape"]), numpy_dtype(t["dtype"]),
                                   _bounds_tuple(t["index_bounds"]) if "index_bounds" in t else None)
                        for t in meta["inputs"]]
        self._outputs = [TensorSpec(t["name"], tuple(t["shape"]), numpy_dtype(t["dtype"])) for t in meta["outputs"]]
        self._output_index = {t.name: i for i, t in enumerate(self._outputs)}
        self._all_outputs = list(range(len(self._outputs)))  # output_indices(None, ...), kept: run's hot path
        self._inputs = [s._replace(index_ignored=t["index_ignored"]) if "index_ignored" in t else s
                        for s, t in zip(self._inputs, meta["inputs"])]  # a loss's ignore_index (runtime/feeds.py)
        source, described = f"the metadata of {lib_path}", meta.get("source_model") or {}
        self._modelmeta = model_metadata(meta.get("source_model"), source)
        self._input_args = node_args(self._inputs, described.get("input_dims"), "input_dims", source)
        self._output_args = node_args(self._outputs, described.get("output_dims"), "output_dims", source)
        self._params = self._init_params(params)
        self._workspaces = WorkspacePool(meta["workspace_bytes"], len(self._inputs), len(self._outputs),
                                         default_max_concurrent_runs(meta))
        self._scratch_dir = owned_dir
        self._lib = _open_library(self.lib_path, self._private_dir)
        self._out_offsets, self._out_block_bytes = packed_offsets(  # the outputs of one call share one block
            math.prod(t.shape) * t.dtype.itemsize for t in self._outputs)
        self._small_outputs = self._out_block_bytes <= SMALL_OUTPUTS_BYTES and \
            all(math.prod(t.shape) for t in self._outputs)  # (an empty array's pointer may be NULL: the block's is not)
        self._params_ptr = self._params.ctypes.data
        self._native_run = self._lib.relayish_run
        self.num_threads = default_num_threads()

    def _init_params(self, params: np.ndarray | None) -> np.ndarray:
        nbytes = self._meta["params_bytes"]
        if params is None:
            return _read_params(params_path(self.lib_path, self._meta), nbytes)
        if not isinstance(params, np.ndarray) or params.nbytes != nbytes:
            given = f"{params.nbytes} bytes" if isinstance(params, np.ndarray) else type(params).__name__
            raise ValueError(f"params for {self.lib_path} must be a numpy array of {nbytes} bytes, got {given}")
        flat = np.ascontiguousarray(params).reshape(-1).view(np.uint8)
        return as_aligned(flat)

    def _private_dir(self) -> str:
        """A temporary directory owned by this Module (created on first use)."""
        if self._scratch_dir is None:
            self._scratch_dir = tempfile.mkdtemp(prefix="relayish-lib-")
            self._finalizer = weakref.finalize(self, shutil.rmtree, self._scratch_dir, True)
        return self._scratch_dir

    # ---- description -------------------------------------------------------------------------------------------
    @property
    def meta(self) -> dict:
        """The metadata (see runtime.metadata); treat it as read-only."""
        return self._meta

    @property
    def input_names(self) -> list[str]:
        return [t.name for t in self._inputs]

    @property
    def output_names(self) -> list[str]:
        return [t.name for t in self._outputs]

    @property
    def input_shapes(self) -> dict[str, tuple]:
        return {t.name: t.shape for t in self._inputs}

    @property
    def input_dtypes(self) -> dict[str, np.dtype]:
        return {t.name: t.dtype for t in self._inputs}

    @property
    def output_shapes(self) -> dict[str, tuple]:
        return {t.name: t.shape for t in self._outputs}

    @property
    def output_dtypes(self) -> dict[str, np.dtype]:
        return {t.name: t.dtype for t in self._outputs}

    @property
    def kernels(self) -> list[dict]:
        return self._meta["kernels"]

    # ---- onnxruntime's InferenceSession API (runtime.session) ----------------------------------------------------
    def get_inputs(self) -> list:
        """NodeArgs of the inputs, in order: .name, .shape (the model's declared dims, symbolic names kept), .type."""
        return list(self._input_args)

    def get_outputs(self) -> list:
        """NodeArgs of the outputs, in order (see get_inputs)."""
        return list(self._output_args)

    def get_modelmeta(self):
        """The ONNX model's producer, graph name, domain, descriptions, version and custom metadata."""
        return self._modelmeta

    def get_providers(self) -> list[str]:
        return [PROVIDER]

    def __repr__(self):
        return (f"Module({self.lib_path!r}, inputs={self.input_shapes}, outputs={self.output_shapes}, "
                f"kernels={len(self.kernels)})")

    # ---- threads -----------------------------------------------------------------------------------------------
    @property
    def num_threads(self) -> int:
        """Threads the library's pool uses (default: all cores of this process)."""
        return int(self._lib.relayish_get_num_threads())

    @num_threads.setter
    def num_threads(self, n: int) -> None:
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"num_threads must be an integer >= 1, got {n!r}")
        self._lib.relayish_set_num_threads(int(n))

    def idle(self) -> None:
        """Let the library's pool workers sleep now rather than spin a moment for a next run: for a caller about to
        run another library (a session switching tiers), whose threads would otherwise share the cores with
        these."""
        self._lib.relayish_pool_idle()

    @property
    def max_concurrent_runs(self) -> int:
        """How many calls of this Module may run native code at once, each with its own workspace (1: calls are
        serialized, one workspace). Lowering it frees the extra workspaces as their calls finish."""
        return self._workspaces.limit

    @max_concurrent_runs.setter
    def max_concurrent_runs(self, n: int) -> None:
        self._workspaces.limit = n

    # ---- running -----------------------------------------------------------------------------------------------
    def _bind_outputs(self, out_ptrs) -> list[np.ndarray]:
        """Fresh output arrays and `out_ptrs` (a slot's) pointed at them: small ones (SMALL_OUTPUTS_BYTES in all)
        each as numpy allocates it, larger ones in one new 64-byte-aligned block (no vector store of a kernel
        splits a cache line). Kernels need only element alignment; the block costs ~1.3 us more per call (its
        views), which is a fifth of run's Python work, and is worth it only where the stores are many."""
        if self._small_outputs:
            outputs = []
            for i, spec in enumerate(self._outputs):
                out = np.empty(spec.shape, spec.dtype)
                out_ptrs[i] = data_address(out)
                outputs.append(out)
            return outputs
        raw = np.empty(self._out_block_bytes + ALIGNMENT, dtype=np.uint8)  # aligned_empty, inlined: hot path
        address = data_address(raw)
        start = -address % ALIGNMENT
        outputs = []
        for i, (spec, offset) in enumerate(zip(self._outputs, self._out_offsets)):
            outputs.append(np.ndarray(spec.shape, dtype=spec.dtype, buffer=raw, offset=start + offset))
            out_ptrs[i] = address + start + offset
        return outputs

    @staticmethod
    def _bind_inputs(arrays, slot) -> None:
        """Point the slot's input table at the checked arrays, read in place (kernels assume only element
        alignment of their parameters); one whose elements are misaligned or that is not C-contiguous is first
        copied into the slot's aligned buffer for it (copying changes no value)."""
        in_ptrs = slot.in_ptrs
        for i, value in enumerate(arrays):
            address = data_address(value)
            if address % value.itemsize or not value.flags.c_contiguous:
                address = slot.stage_input(i, value)
            in_ptrs[i] = address

    def run(self, output_names: list[str] | None, input_feed: dict, run_options=None) -> list[np.ndarray]:
        """Run one inference: one native call. Returns the requested outputs (all if None or []), in the order
        asked, freshly allocated. Raises ValueError, naming the input, for a feed that does not match the model
        (runtime.feeds). run_options: a runtime.session.RunOptions (or onnxruntime's): its terminate flag makes
        the call raise RunTerminated before it runs, its logid prefixes error messages."""
        tag = check_run_options(run_options)
        try:
            wanted = self._all_outputs if output_names is None else output_indices(output_names, self._output_index)
            arrays = check_feed(self._inputs, input_feed)  # they stay alive until the call returns
        except ValueError as e:
            raise tagged(e, tag) from None
        workspaces = self._workspaces
        slot = workspaces.acquire()
        try:
            if run_options is not None:  # set while this call waited for a workspace
                check_run_options(run_options)
            self._bind_inputs(arrays, slot)
            outputs = self._bind_outputs(slot.out_ptrs)
            self._native_run(slot.in_ptrs_address, slot.out_ptrs_address, self._params_ptr, slot.workspace_ptr)
        finally:
            workspaces.release(slot)
        return outputs if wanted is self._all_outputs else pick_outputs(outputs, wanted)

    def random_inputs(self, seed: int = 0) -> dict[str, np.ndarray]:
        """Reproducible inputs: floats ~ N(0, 1); integers in {0, 1} (valid as indices into any non-empty axis)."""
        rng = np.random.default_rng(seed)
        feed = {}
        for t in self._inputs:
            if t.dtype.kind == "f" or t.dtype.name == "bfloat16":
                feed[t.name] = rng.standard_normal(t.shape).astype(t.dtype)
            else:
                feed[t.name] = rng.integers(0, 2, size=t.shape).astype(t.dtype)
        return feed

    # ---- measuring ---------------------------------------------------------------------------------------------
    def benchmark(self, repeat: int = 50, warmup: int = 5, inputs: dict | None = None) -> dict:
        """Wall time of `run` (as a caller sees it): {median_ms, mean_ms, min_ms, max_ms, std_ms, repeat}."""
        if repeat < 1 or warmup < 0:
            raise ValueError(f"benchmark needs repeat >= 1 and warmup >= 0, got repeat={repeat}, warmup={warmup}")
        feed = self.random_inputs() if inputs is None else inputs
        for _ in range(warmup):
            self.run(None, feed)
        times = []
        for _ in range(repeat):
            start = time.perf_counter_ns()
            self.run(None, feed)
            times.append(time.perf_counter_ns() - start)
        return summarize_times(times)

    @contextmanager
    def bound_run(self, inputs: dict | None = None):
        """`with module.bound_run(feed) as call: call()`: `call()` is the one native call of `run` on a workspace,
        inputs and outputs bound once when the block is entered (the inputs checked as `run` checks them): `run`
        without its Python work, for measuring that work (bench/dispatch.py). The workspace is held until the
        block exits; the outputs (overwritten by every call) are `call.outputs`."""
        arrays = check_feed(self._inputs, self.random_inputs() if inputs is None else inputs)  # kept alive
        with self._workspaces.slot() as slot:
            self._bind_inputs(arrays, slot)
            outputs = self._bind_outputs(slot.out_ptrs)
            native, args = self._native_run, (slot.in_ptrs_address, slot.out_ptrs_address, self._params_ptr,
                                            slot.workspace_ptr)

            def call():
                native(*args)
            call.outputs = dict(zip(self.output_names, outputs))
            yield call

    def profile(self, repeat: int = 20, inputs: dict | None = None) -> list[dict]:
        """Per-kernel median times over `repeat` profiled runs (after one warm-up run); see profiling.profile_rows."""
        if repeat < 1:
            raise ValueError(f"profile needs repeat >= 1, got {repeat}")
        arrays = check_feed(self._inputs, self.random_inputs() if inputs is None else inputs)  # kept alive
        counters = (ctypes.c_int64 * max(len(self.kernels), 1))()
        samples = np.zeros((repeat, len(self.kernels)), dtype=np.int64)
        with self._workspaces.slot() as slot:
            self._bind_inputs(arrays, slot)
            outputs = self._bind_outputs(slot.out_ptrs)  # noqa: F841 - kept alive during the calls
            args = (slot.in_ptrs, slot.out_ptrs, self._params_ptr, slot.workspace_ptr, counters)
            self._lib.relayish_run_profiled(*args)  # warm-up
            for r in range(repeat):
                self._lib.relayish_run_profiled(*args)
                samples[r] = counters[:len(self.kernels)]
        return profile_rows(self.kernels, samples)

    # ---- saving ------------------------------------------------------------------------------------------------
    def export_library(self, path: str) -> str:
        """Write the library to `path`, with its metadata at path + ".json" and its weights at path + ".params".

        The metadata records the SHA-256 of the three (runtime.integrity), which load_module checks. Each file is
        replaced atomically, so exporting over a library that some process has loaded is safe. Returns the absolute
        path of the library.
        """
        path = os.path.abspath(path)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(self.lib_path, "rb") as src:
            library = src.read()
        meta = dict(self._meta, params_file=os.path.basename(path) + ".params")
        meta["sha256"] = content_hashes(json.loads(dump_metadata(meta, path + ".json")), library, self._params)
        if not (os.path.exists(path) and os.path.samefile(path, self.lib_path)):
            _replace_file(path, lambda f: f.write(library))
        _replace_file(path + ".params", lambda f: f.write(memoryview(self._params)))
        meta_text = dump_metadata(meta, path + ".json").encode()
        _replace_file(path + ".json", lambda f: f.write(meta_text))
        return path


def load_module(path: str) -> Module:
    """Load the library at `path` with its metadata (path + ".json") and weights (meta["params_file"]).

    Before any code of the library runs (dlopen runs its initializers), checks the metadata's format, the hashes
    recorded at export of the metadata's fields, the weights and the library (runtime.integrity), the memory the
    model needs and the CPU features it was compiled for. Raises FileMissingError (a FileNotFoundError) for a missing
    file, LoadError (a ValueError) for any other problem; every message names the file. Imports neither onnx nor
    llvmlite.
    """
    if not os.path.isfile(path):
        raise FileMissingError(f"compiled library not found: {path}")
    source = path + ".json"
    meta = read_metadata(source)
    verify_fields(meta, source)
    check_memory(meta, source)
    digests = check_hash_entry(meta, source)
    weights_path = params_path(path, meta)
    params = _read_params(weights_path, meta["params_bytes"])
    verify_file(params, digests["params"], weights_path, "weights file")
    with open(path, "rb") as f:
        verify_file(f.read(), digests["library"], path, "library")
    return Module(path, meta, params=params)
