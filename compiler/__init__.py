"""compiler: graph passes, tasks, schedules, lowering, codegen, the tuning records store and `compile_model`.

Read compiler/passes/__init__.py (the graph half of the pipeline), then compiler/backend.py (the back half)."""
from .compile import build, compile_model, compile_with, load_session
from .options import CompileOptions, DefaultSchedules, Layout, as_default_schedules
from .task import extract_tasks

__all__ = ["CompileOptions", "DefaultSchedules", "Layout", "as_default_schedules", "build", "compile_model", "compile_with", "extract_tasks",
           "load_session"]
