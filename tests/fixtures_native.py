"""A tiny fake compiled model, built from C with the system compiler, that follows the relayish native ABI exactly.

It lets the runtime and CLI be tested without the code generator. The "model":

    inputs:  x float32 [2, 3], k int64 [2]          params: float32 [scale, shift]
    kernel 0 "fused_multiply":  tmp = x * scale       (tmp lives in the workspace)
    kernel 1 "fused_add":       y   = tmp + shift
    kernel 2 "fused_sum_add":   s[i] = sum_j y[i, j] + k[i]
    outputs: y float32 [2, 3], s float32 [2]

Besides the ABI it exports two test probes: fixture_calls() counts native runs and fixture_misaligned() counts
buffers that were not 64-byte aligned.
"""
from __future__ import annotations

import ctypes
import json
import os
import platform
import shutil
import subprocess

import numpy as np

from runtime.integrity import content_hashes

C_SOURCE = r"""
#include <stdint.h>
#include <time.h>

#ifndef EXTRA
#define EXTRA 0.0f
#endif

static int32_t g_threads = 1;
static int64_t g_calls = 0, g_misaligned = 0;

void relayish_set_num_threads(int32_t n) { g_threads = n; }
int32_t relayish_get_num_threads(void) { return g_threads; }
int64_t fixture_calls(void) { return g_calls; }
int64_t fixture_misaligned(void) { return g_misaligned; }

static void check(const void *p) { if ((uintptr_t)p % 64) g_misaligned++; }
static int64_t now_ns(void) {
  struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void run(int8_t **in, int8_t **out, int8_t *params, int8_t *ws, int64_t *ns) {
  const float *x = (const float *)in[0], *p = (const float *)params;
  const int64_t *k = (const int64_t *)in[1];
  float *tmp = (float *)ws, *y = (float *)out[0], *s = (float *)out[1];
  g_calls++;
  check(in[0]); check(in[1]); check(out[0]); check(out[1]); check(params); check(ws);
  int64_t t0 = now_ns();
  for (int i = 0; i < 6; i++) tmp[i] = x[i] * p[0];
  int64_t t1 = now_ns();
  for (int i = 0; i < 6; i++) y[i] = tmp[i] + p[1] + EXTRA;
  int64_t t2 = now_ns();
  for (int i = 0; i < 2; i++) s[i] = y[3 * i] + y[3 * i + 1] + y[3 * i + 2] + (float)k[i];
  int64_t t3 = now_ns();
  if (ns) { ns[0] = t1 - t0 + 1; ns[1] = t2 - t1 + 1; ns[2] = t3 - t2 + 1; }
}

void relayish_run(int8_t **in, int8_t **out, int8_t *params, int8_t *ws) { run(in, out, params, ws, 0); }
void relayish_run_profiled(int8_t **in, int8_t **out, int8_t *params, int8_t *ws, int64_t *ns) {
  run(in, out, params, ws, ns);
}
"""

PARAMS = np.array([2.5, -1.0], dtype=np.float32)


def fixture_meta(params_file: str) -> dict:
    """The metadata of the fake model (format_version 1, see runtime.metadata)."""
    return {
        "format_version": 1,
        "inputs": [{"name": "x", "shape": [2, 3], "dtype": "float32"}, {"name": "k", "shape": [2], "dtype": "int64"}],
        "outputs": [{"name": "y", "shape": [2, 3], "dtype": "float32"},
                    {"name": "s", "shape": [2], "dtype": "float32"}],
        "workspace_bytes": 24,
        "params_bytes": PARAMS.nbytes,
        "params_file": params_file,
        "kernels": [
            {"name": "fused_multiply", "ops": ["multiply"], "output_shape": [2, 3], "layout": "", "flops": 6},
            {"name": "fused_add", "ops": ["add"], "output_shape": [2, 3], "layout": "", "flops": 6},
            {"name": "fused_sum_add", "ops": ["sum", "add"], "output_shape": [2], "layout": "", "flops": 8},
        ],
        "target": {"triple": f"{platform.machine()}-unknown-linux-gnu", "cpu": "generic", "features": ""},
        "compile_info": {"fixture": True},
    }


def reference_outputs(x: np.ndarray, k: np.ndarray, extra: float = 0.0) -> list[np.ndarray]:
    """What the fake model computes, in numpy."""
    y = x * PARAMS[0] + PARAMS[1] + np.float32(extra)
    return [y, y.sum(axis=1) + k.astype(np.float32)]


def have_compiler() -> bool:
    return shutil.which("cc") is not None


def build_fixture_library(directory: str, name: str = "fake.so", extra: float = 0.0) -> str:
    """Compile the fake model into directory/name and write name.json and name.params beside it; returns the path.

    `extra` is compiled into the code (y = tmp + shift + extra), to tell two builds of the library apart.
    """
    lib = os.path.join(directory, name)
    src = os.path.join(directory, name + ".c")
    with open(src, "w") as f:
        f.write(C_SOURCE)
    # No FMA contraction, so that the C results equal numpy's bit for bit.
    cmd = ["cc", "-O2", "-ffp-contract=off", "-shared", "-fPIC", f"-DEXTRA={extra!r}f", "-o", lib, src]
    subprocess.run(cmd, check=True, capture_output=True)
    with open(lib + ".json", "w") as f:
        json.dump(fixture_meta(name + ".params"), f)
    PARAMS.tofile(lib + ".params")
    reseal(lib)
    return lib


def reseal(lib_path: str) -> None:
    """Rewrite the content hashes in lib_path + ".json" for the files as they are now (what export_library writes),
    so that a test can reach the checks that come after the hashes."""
    with open(lib_path + ".json") as f:
        meta = json.load(f)
    with open(lib_path, "rb") as f:
        library = f.read()
    with open(os.path.join(os.path.dirname(lib_path), meta["params_file"]), "rb") as f:
        meta["sha256"] = content_hashes(meta, library, f.read())
    with open(lib_path + ".json", "w") as f:
        json.dump(meta, f)


def probe(lib_path: str, symbol: str) -> int:
    """Call one of the fixture's int64-returning probes in the library as loaded by this process."""
    fn = getattr(ctypes.CDLL(os.path.realpath(lib_path)), symbol)
    fn.restype = ctypes.c_int64
    return int(fn())
