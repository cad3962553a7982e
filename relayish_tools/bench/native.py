"""Kernels outside a model: several PrimFuncs built into one shared library, called through ctypes with numpy arrays.

    kernels = NativeKernels([func_a, func_b])       # one library, one thread pool for all of them
    args = kernels.arguments("func_a", inputs)       # aligned copies of the inputs, zeroed outputs and scratch
    call = kernels.caller("func_a", args)            # call() runs the kernel once on args
    output = args[func_a.attrs["num_inputs"]]

Parameters are in the kernel's order: inputs, outputs, then scratch (`func.attrs` counts them). The kernel benchmark and
the cost model's dataset harness time kernels this way; the tests run single kernels this way.
"""
from __future__ import annotations

import ctypes
import os
import tempfile

import numpy as np

from compiler.codegen import build_library
from compiler.loopir import PrimFunc
from runtime.aligned import kernel_arguments


class NativeKernels:
    """Kernels built into one shared library, callable by name with numpy arrays (one per kernel parameter)."""

    def __init__(self, funcs: list[PrimFunc]):
        with tempfile.TemporaryDirectory(prefix="relayish_kernels_") as directory:
            path = os.path.join(directory, "kernels.so")
            build_library(funcs, None, path)
            self.lib = ctypes.CDLL(path)  # stays mapped after the file is removed
        self.funcs = {f.name: f for f in funcs}
        self.lib.relayish_set_num_threads.argtypes = [ctypes.c_int32]
        for f in funcs:
            getattr(self.lib, f.name).argtypes = [ctypes.c_void_p] * len(f.params)
            getattr(self.lib, f.name).restype = None

    def set_threads(self, n: int):
        self.lib.relayish_set_num_threads(n)

    def idle(self):
        """Let the pool's workers sleep now (as the model executor does at the end of a run)."""
        self.lib.relayish_pool_idle()

    def arguments(self, name: str, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """Aligned copies of the inputs, then zeroed outputs and scratch buffers, in parameter order."""
        func = self.funcs[name]
        n_in = func.attrs["num_inputs"]
        if len(inputs) != n_in:
            raise ValueError(f"kernel {name} takes {n_in} inputs, got {len(inputs)}")
        try:
            return kernel_arguments([(b.shape, b.dtype) for b in func.params], inputs)
        except ValueError as e:
            raise ValueError(f"kernel {name}: {e}") from None

    def caller(self, name: str, args: list[np.ndarray]):
        """A no-argument function that runs the kernel once on args (and keeps them alive: the kernel holds only
        their addresses)."""
        fn = getattr(self.lib, name)
        ptrs = [a.ctypes.data for a in args]

        def call(_keep=args):
            fn(*ptrs)
        return call
