"""`python -m models [OUT_DIR]`: build resnet18.onnx and resnet18_folded.onnx (default: next to this file)."""
import sys
from pathlib import Path

from .resnet18 import build_resnet18


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__)
        return
    out_dir = Path(argv[0]) if argv else Path(__file__).parent
    for name, fold in (("resnet18.onnx", False), ("resnet18_folded.onnx", True)):
        print(build_resnet18(out_dir / name, fold_bn=fold))


if __name__ == "__main__":
    main()
