"""What every `relayish` subcommand shares: exit codes, the user-facing error, argument types, option groups, and
compiling or loading the model a command works on."""
from __future__ import annotations

import argparse
import importlib.metadata
import os
import re
import sys

import runtime

EXIT_OK, EXIT_FAIL, EXIT_ERROR = 0, 1, 2


class CliError(Exception):
    """A user-facing error: printed as `error: <message>`, exit code 2."""


# ---- argument parsing ------------------------------------------------------------------------------------------
DIM_HELP = "a dim: a size, ? (or -1) for a free dim, or LO:HI for a free dim in that range"


def parse_dim(text: str):
    """'224' -> 224, '?' or '-1' -> None (free), '16:2048' -> (16, 2048) (free in that closed range); ValueError
    otherwise."""
    text = text.strip()
    if text in ("?", "-1"):
        return None
    lo, sep, hi = text.partition(":")
    if sep:
        lo, hi = int(lo), int(hi)
        if not 0 <= lo <= hi:
            raise ValueError(text)
        return lo, hi
    value = int(text)
    if value < 0:
        raise ValueError(text)
    return value


def _dims(text: str) -> tuple:
    return tuple(parse_dim(d) for d in text.split(",")) if text.strip() else ()


def parse_input_shape(text: str) -> tuple[str, tuple]:
    """'data=1,3,224,224' -> ('data', (1, 3, 224, 224)); 'x=1,3,48,?' leaves dim 3 free (see parse_dim). The name
    is everything before the last '='."""
    name, sep, dims = text.rpartition("=")
    try:
        shape = _dims(dims)
    except ValueError:
        shape = None
    if not sep or not name or shape is None:
        raise argparse.ArgumentTypeError(f"expected NAME=D1,D2,... ({DIM_HELP}), got {text!r}")
    return name, shape


_TVMC_SHAPES = re.compile(r"(?:\s*,?\s*\S+?:\s*\[[^\]]*\])+\s*")
_TVMC_SHAPE = re.compile(r"\s*,?\s*(\S+?):\s*\[([^\]]*)\]")


def parse_tvmc_shapes(text: str) -> list[tuple[str, tuple]]:
    """tvmc's spelling: 'data:[1,3,224,224] mask:[1,128]' -> [('data', (1, 3, 224, 224)), ('mask', (1, 128))].
    Entries are separated by spaces or commas; a name may itself contain ':' (everything before the last ':[')."""
    if not _TVMC_SHAPES.fullmatch(text):
        raise argparse.ArgumentTypeError(f"expected NAME:[D1,D2,...] entries separated by spaces, got {text!r}")
    pairs = []
    for match in _TVMC_SHAPE.finditer(text):
        name, dims = match.groups()
        try:
            shape = _dims(dims)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name}:[{dims}]: {DIM_HELP}") from None
        pairs.append((name, shape))
    return pairs


def parse_sizes(text: str) -> tuple[str, tuple[int, ...]]:
    """'width=160,320' -> ('width', (160, 320)): sizes of a free dim, by its symbol."""
    symbol, sep, values = text.rpartition("=")
    try:
        sizes = tuple(int(v) for v in values.split(","))
    except ValueError:
        sizes = None
    if not sep or not symbol or not sizes or any(v < 0 for v in sizes):
        raise argparse.ArgumentTypeError(f"expected SYMBOL=N,N,... with non-negative sizes, got {text!r}")
    return symbol, sizes


def input_shapes_arg(pairs) -> dict | None:
    """The --input-shape list as a dict (None when not given); a name given twice is an error."""
    if not pairs:
        return None
    shapes = {}
    for name, shape in pairs:
        if name in shapes:
            raise CliError(f"--input-shape given twice for input {name!r}")
        shapes[name] = shape
    return shapes


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def add_compile_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--input-shape", dest="input_shapes", action="append", type=parse_input_shape, metavar="NAME=DIMS",
                   help="fix an input's shape, e.g. data=1,3,224,224, or leave dims free: x=1,3,48,? or "
                        "x=1,3,48,16:2048 (repeatable)")
    p.add_argument("--input-shapes", dest="input_shapes", action="extend", type=parse_tvmc_shapes,
                   metavar="'NAME:[DIMS] ...'", help="the same in tvmc's spelling, e.g. 'data:[1,3,224,224] k:[2]'")
    p.add_argument("--layout", choices=["NCHW", "NCHWc"], default="NCHWc", help="data layout of convolutions")
    p.add_argument("--records", metavar="DB", help="tuning records database to take schedules from")
    p.add_argument("--predicted", nargs="?", const="pretrained", metavar="COST_MODEL",
                   help="zero-shot schedules: each task's schedule ranked by the pretrained cost model, no "
                   "measurement (tuning/zero_shot.py); optionally a cost model file instead of the shipped one")
    p.add_argument("--opt-level", type=int, default=3, choices=range(4), help="graph optimisation level")
    add_winograd(p)
    p.add_argument("--no-cache", dest="cache", action="store_false", default=None,
                   help="compile from scratch, neither reading nor writing the compile cache (RELAYISH_CACHE_DIR)")
    p.add_argument("-v", "--verbose", action="store_true", help="print what the compiler does")


def add_sizes(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--sizes", action="append", default=[], type=parse_sizes, metavar="SYMBOL=N,N,...",
                   help=f"with free dims (--input-shape x=1,3,48,?): sizes of a free dim {what} (repeatable, one per "
                        "symbol; lists of one length are zipped)")


def add_winograd(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-winograd", dest="winograd", action="store_false",
                   help="keep every convolution direct (default: 3x3 stride-1 ones with enough tiles use Winograd)")


def add_threads(p: argparse.ArgumentParser) -> None:
    p.add_argument("--threads", type=positive_int, metavar="N", help="threads to run with (default: all cores)")


def relayish_version() -> str:
    """The installed package's version ('unknown' when relayish runs from a source tree that is not installed)."""
    try:
        return importlib.metadata.version("relayish")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


# ---- the model a command works on ------------------------------------------------------------------------------
def existing(path: str, what: str) -> str:
    if not os.path.isfile(path):
        raise CliError(f"{what} not found: {path}")
    return path


def compile_options(args):
    """The command's compiler.options.CompileOptions (the compiler is imported only when a command compiles)."""
    from compiler import CompileOptions
    try:
        return CompileOptions(input_shapes=input_shapes_arg(args.input_shapes), layout=args.layout,
                              opt_level=args.opt_level, records=_records(args), num_threads=args.threads or None,
                              verbose=args.verbose, winograd=args.winograd, cache=getattr(args, "cache", None))
    except ValueError as e:
        raise CliError(str(e)) from None


def _records(args):
    """--records DB, or with --predicted the zero-shot schedules of the model (tuning.zero_shot)."""
    predicted = getattr(args, "predicted", None)
    if predicted is None:
        return args.records
    if args.records:
        raise CliError("--predicted and --records both choose schedules: give one")
    from tuning.pretrained import CostModelFileError, load_cost_model
    from tuning.zero_shot import predict_schedules
    model_path = getattr(args, "model", None) or getattr(args, "path", None)
    try:
        model = load_cost_model(None if predicted == "pretrained" else predicted)
        if model is None:
            raise CliError("--predicted: no pretrained cost model ships with this installation (build one with "
                           "python -m relayish_tools.bench.pretrain, then give its file: --predicted FILE)")
        chosen = predict_schedules(existing(model_path, "model file"), model=model,
                                   input_shapes=input_shapes_arg(args.input_shapes), layout=args.layout,
                                   winograd=args.winograd, progress=sys.stderr.isatty(),
                                   log=(lambda msg: print(msg, file=sys.stderr)) if args.verbose else None)
    except CostModelFileError as e:
        raise CliError(str(e)) from None
    print(f"zero-shot schedules: {chosen.summary()}", file=sys.stderr)
    return chosen


def compile_from_args(args, model_path: str):
    """compile_model with the command's options."""
    try:
        from compiler import compile_model
    except ImportError as e:
        raise CliError(f"the compiler is not available yet (from compiler import compile_model: {e})") from None
    existing(model_path, "model file")
    return compile_model(model_path, options=compile_options(args))


def is_dynamic(module) -> bool:
    """Whether `module` is a session with free dims (compiler.dynamic.ShapeSpecializedSession)."""
    return hasattr(module, "specializations")


def refuse_sizes(args) -> None:
    """--sizes given for a model compiled with no free dim: a CliError saying how to leave dims free."""
    if args.sizes:
        raise CliError("--sizes: the model has no free dims (leave some free: --input-shape x=1,3,?,?)")


def free_dim_shapes(session, sizes: list) -> list[dict]:
    """The input shapes to bench a session with free dims at: --sizes SYMBOL=N,... per free symbol, zipped."""
    symbols = session.free_dims
    given = dict(sizes)
    unknown = sorted(set(given) - set(symbols))
    missing = sorted(set(symbols) - set(given))
    if unknown or missing:
        raise CliError("the model's free dims are " + ", ".join(f"{k} ({v})" for k, v in symbols.items())
                       + ": give the sizes of each with --sizes SYMBOL=N,N,..."
                       + (f" (no free dim is called {', '.join(unknown)})" if unknown else ""))
    lengths = {len(v) for v in given.values()}
    if len(lengths) != 1:
        raise CliError(f"--sizes lists of different lengths {sorted(lengths)}: they are zipped, one size of each "
                       "symbol per shape")
    shapes = []
    for k in range(lengths.pop()):
        values = {symbol: v[k] for symbol, v in given.items()}
        shapes.append({arg.name: tuple(values[d] if isinstance(d, str) else d for d in arg.shape)
                       for arg in session.get_inputs()})
    return shapes


def load_or_compile(args):
    """A compiled library is loaded; an .onnx model is compiled; a folder that `relayish compile` wrote for a
    model with free dims is loaded as its session (compiler.load_session)."""
    if args.path.lower().endswith(".onnx"):
        return compile_from_args(args, args.path)
    if os.path.isdir(args.path):
        from compiler import load_session
        try:
            model = getattr(args, "model", None)
            return load_session(args.path, existing(model, "model file") if model else None, args.threads)
        except (OSError, ValueError) as e:
            raise CliError(f"{args.path}: not a session folder that relayish compile wrote ({e})") from None
    module = runtime.load_module(args.path)
    if args.threads:
        module.num_threads = args.threads
    return module
