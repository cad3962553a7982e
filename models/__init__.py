"""Reference ONNX models, built from code (model files are never committed); models/suite.py lists them.

`from models import build_resnet18` (or any build_<module> / make_<module>) works; the imports are lazy so that
`python -m models.resnet18` does not import its own module twice."""

MODULES = ("resnet18", "mobilenet_v2", "shufflenet_v1", "squeezenet", "googlenet", "densenet", "alexnet", "vgg",
           "zfnet512", "crnn", "bytecnn", "bert", "gpt", "quantized")
__all__ = [f"{kind}_{m}" for m in MODULES for kind in ("build", "make")]


def __getattr__(name):
    if name in __all__:
        import importlib
        return getattr(importlib.import_module(f"models.{name.split('_', 1)[1]}"), name)
    raise AttributeError(f"module 'models' has no attribute {name!r}")
