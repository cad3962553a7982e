"""Tampered, truncated or mixed-up exported libraries fail to load with a clear LoadError naming the file and the
problem, before any of their code runs: never a crash, never an out-of-bounds read.

Each case edits a copy of a real exported model and loads it in a child process (load + one run), so that a crash
would show as a signal, not take pytest down; the child must exit with the error's message.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from compiler import compile_model
from fixtures_native import reseal
from test_concurrency import small_model

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOAD_AND_RUN = textwrap.dedent("""
    import sys
    import runtime
    {prelude}
    m = runtime.load_module(sys.argv[1])
    outs = m.run(None, m.random_inputs())
    print("ran", [o.shape for o in outs])
""")


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """{name: path} of two exported models: "m" (small_model()) and "other" (a different small model)."""
    root = tmp_path_factory.mktemp("exported")
    return {"m": compile_model(small_model()).export_library(str(root / "m" / "m.so")),
            "other": compile_model(small_model(channels=4, classes=3, seed=1)).export_library(
                str(root / "other" / "o.so"))}


@pytest.fixture()
def lib(exported, tmp_path):
    """A private copy of the exported "m" files, free to be damaged."""
    src_dir = os.path.dirname(exported["m"])
    shutil.copytree(src_dir, tmp_path / "lib")
    return str(tmp_path / "lib" / "m.so")


def load_in_child(path: str, prelude: str = "") -> subprocess.CompletedProcess:
    script = LOAD_AND_RUN.format(prelude=prelude)
    return subprocess.run([sys.executable, "-c", script, path], cwd=REPO, capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, PYTHONPATH=REPO))


def assert_refused(path: str, error: str, message: str, prelude: str = "") -> None:
    """Loading `path` in a child ends in a Python exception `error` whose message matches `message` and names the
    library's folder: exit status 1, not a signal, not success."""
    proc = load_in_child(path, prelude)
    assert proc.returncode == 1, f"exit {proc.returncode} (negative: killed by a signal)\n{proc.stderr[-2000:]}"
    last = proc.stderr.strip().splitlines()[-1]
    assert last.split(":")[0].endswith(error), last
    assert os.path.dirname(path) in last, last
    assert __import__("re").search(message, last), last


def edit_meta(path: str, edit) -> None:
    with open(path + ".json") as f:
        meta = json.load(f)
    edit(meta)
    with open(path + ".json", "w") as f:
        json.dump(meta, f)


def test_an_intact_export_loads_and_runs(lib):
    proc = load_in_child(lib)
    assert proc.returncode == 0 and "ran [(1, 10), (1, 16, 8, 8)]" in proc.stdout, proc.stderr
    meta = json.load(open(lib + ".json"))
    assert set(meta["sha256"]) == {"library", "params", "fields"}


# ---- weights ---------------------------------------------------------------------------------------------------
def test_truncated_weights(lib):
    with open(lib + ".params", "r+b") as f:
        f.truncate(os.path.getsize(lib + ".params") - 4)
    assert_refused(lib, "LoadError", r"corrupt params file .*m\.so\.params: it has \d+ bytes, the metadata says")


def test_damaged_weights_of_the_right_size(lib):
    data = bytearray(open(lib + ".params", "rb").read())
    data[100] ^= 0xFF
    open(lib + ".params", "wb").write(bytes(data))
    assert_refused(lib, "LoadError", r"m\.so\.params: the weights file does not match the SHA-256 recorded")


def test_missing_weights(lib):
    os.unlink(lib + ".params")
    assert_refused(lib, "FileMissingError", r"params file not found: .*m\.so\.params")


@pytest.mark.parametrize("name", ["/etc/passwd", "../m.so.params", "sub/m.so.params", "..", "", "a\\b"])
def test_params_file_outside_the_library_folder_is_refused(lib, name):
    edit_meta(lib, lambda m: m.update(params_file=name))
    assert_refused(lib, "MetadataError", r"'params_file' must be a bare file name in the library's directory")


# ---- metadata --------------------------------------------------------------------------------------------------
def _set_input(key, value):
    return lambda m: m["inputs"][0].update({key: value})


METADATA_EDITS = {
    "input shape": (_set_input("shape", [1, 8, 32, 32]), "inputs"),
    "input rank": (_set_input("shape", [8, 16, 16]), "inputs"),
    "input dtype": (_set_input("dtype", "float64"), "inputs"),
    "output shape": (lambda m: m["outputs"][1].update(shape=[1, 16, 16, 16]), "outputs"),
    "inputs emptied": (lambda m: m.update(inputs=[]), "inputs"),
    "outputs emptied": (lambda m: m.update(outputs=[]), "outputs"),
    "input dropped": (lambda m: m["inputs"].pop(), "inputs"),
    "kernels dropped": (lambda m: m["kernels"].pop(), "kernels"),
    "workspace 0": (lambda m: m.update(workspace_bytes=0), "workspace_bytes"),
    "workspace huge": (lambda m: m.update(workspace_bytes=1 << 55), "workspace_bytes"),
    "params_bytes": (lambda m: m.update(params_bytes=m["params_bytes"] + 64), "params_bytes"),
    "target features": (lambda m: m["target"].update(features=""), "target"),
}


@pytest.mark.parametrize("case", list(METADATA_EDITS))
def test_edited_metadata_is_refused_naming_the_field(lib, case):
    edit, field = METADATA_EDITS[case]
    edit_meta(lib, edit)
    assert_refused(lib, "MetadataError", rf"corrupt metadata in .*m\.so\.json: field\(s\) {field} do not match the "
                                         rf"hashes written at export")


def test_metadata_that_is_not_json(lib):
    with open(lib + ".json", "r+b") as f:
        f.truncate(100)
    assert_refused(lib, "MetadataError", r"corrupt metadata in .*m\.so\.json: not valid JSON")


def test_missing_or_malformed_hashes(lib):
    edit_meta(lib, lambda m: m["sha256"].update(library="00" * 31))
    assert_refused(lib, "MetadataError", r"m\.so\.json: 'sha256' must hold hex SHA-256 digests")
    edit_meta(lib, lambda m: m.pop("sha256"))
    assert_refused(lib, "MetadataError", r"m\.so\.json has no content hashes \('sha256'\): it was exported by an "
                                         r"older relayish")


def test_a_really_huge_workspace_fails_fast(lib):
    """A library whose hashes match a workspace larger than the machine's memory (a genuine but impossible
    model) is refused before anything is allocated."""
    edit_meta(lib, lambda m: m.update(workspace_bytes=1 << 55))
    reseal(lib)
    assert_refused(lib, "LoadError", r"the model needs 36028797018963968 bytes of workspace and \d+ bytes of "
                                     r"weights, more than this machine's \d+ bytes of memory")


# ---- the library file ------------------------------------------------------------------------------------------
def test_missing_library(lib):
    os.unlink(lib)
    assert_refused(lib, "FileMissingError", r"compiled library not found: .*m\.so")


def test_truncated_library(lib):
    with open(lib, "r+b") as f:
        f.truncate(os.path.getsize(lib) // 2)
    assert_refused(lib, "LoadError", r"m\.so: the library does not match the SHA-256 recorded in its metadata")


def test_another_models_library_in_its_place(lib, exported):
    shutil.copyfile(exported["other"], lib)
    assert_refused(lib, "LoadError", r"m\.so: the library does not match the SHA-256 recorded in its metadata")


def test_a_non_library_with_matching_hashes_is_a_load_error(lib):
    with open(lib, "wb") as f:
        f.write(b"\x7fELF" + bytes(1000))
    reseal(lib)
    assert_refused(lib, "LoadError", r"cannot load compiled library .*m\.so")


# ---- target ----------------------------------------------------------------------------------------------------
def test_a_library_for_cpu_features_this_host_lacks_is_refused(lib):
    features = json.load(open(lib + ".json"))["target"]["features"]
    assert "+avx" in features or "+neon" in features  # a real target string of this host
    prelude = "runtime.target.host_cpu_flags = lambda: frozenset({'fpu'})"
    assert_refused(lib, "TargetMismatchError", r"m\.so was compiled for CPU .* with features this CPU lacks: ",
                   prelude)


def test_a_library_for_another_architecture_is_refused(lib):
    edit_meta(lib, lambda m: m["target"].update(triple="riscv64-unknown-linux-gnu"))
    reseal(lib)
    assert_refused(lib, "TargetMismatchError", r"m\.so was compiled for riscv64-unknown-linux-gnu, but this machine")


def test_export_hashes_are_reproducible(lib, tmp_path):
    """Exporting a loaded library again writes the same hashes (the digests depend on content only)."""
    import runtime
    meta = json.load(open(lib + ".json"))
    again = runtime.load_module(lib).export_library(str(tmp_path / "again" / "m.so"))
    assert json.load(open(again + ".json"))["sha256"] == meta["sha256"]
    np.testing.assert_array_equal(np.fromfile(again + ".params", np.uint8), np.fromfile(lib + ".params", np.uint8))
