"""compiler: graph passes, tasks, schedules, lowering, codegen, the tuning records store and `compile_model`."""
from .build import build, compile_model, extract_tasks

__all__ = ["build", "compile_model", "extract_tasks"]
