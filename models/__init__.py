"""Reference ONNX models, built from code (model files are never committed).

`from models import build_resnet18` works; the import is lazy so that `python -m models.resnet18` does not
import its own module twice."""

__all__ = ["build_resnet18", "make_resnet18"]


def __getattr__(name):
    if name in __all__:
        from . import resnet18
        return getattr(resnet18, name)
    raise AttributeError(f"module 'models' has no attribute {name!r}")
