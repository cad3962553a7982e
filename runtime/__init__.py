"""The runtime: load a compiled library and run, benchmark, profile or export it.

Imports only numpy, ctypes and the standard library: a deployed model needs neither onnx nor llvmlite.
"""
from .aligned import ALIGNMENT, aligned_empty, as_aligned, is_aligned
from .metadata import (FORMAT_VERSION, FileMissingError, LoadError, MetadataError, dump_metadata, read_metadata,
                       validate_metadata)
from .module import Module, TensorSpec, default_num_threads, load_module
from .profiling import format_profile, profile_rows, summarize_times
from .session import ModelMetadata, NodeArg, RunOptions, RunTerminated
from .target import TargetMismatchError, check_target, host_cpu_flags

__all__ = [
    "ALIGNMENT", "FORMAT_VERSION", "FileMissingError", "LoadError", "MetadataError", "ModelMetadata", "Module",
    "NodeArg", "RunOptions", "RunTerminated", "TargetMismatchError", "TensorSpec", "aligned_empty", "as_aligned",
    "check_target", "default_num_threads", "dump_metadata",
    "format_profile", "host_cpu_flags", "is_aligned", "load_module", "profile_rows", "read_metadata",
    "summarize_times", "validate_metadata",
]
