"""The compile cache (compiler/cache.py): a second compile of the same model is a load; the key changes with every
part (model bytes, an option, the records' content, relayish's source, the target); a damaged entry is rebuilt;
concurrent compiles of one model leave one valid entry."""
from __future__ import annotations

import os
import threading

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from compiler import cache as cache_module
from compiler import compile_model
from compiler.codegen import host_target

OPTIONS = {"input_shapes": {}, "layout": "NCHWc", "opt_level": 3, "winograd": True, "strict": False,
           "default_schedules": "hand-written"}  # compile_model's defaults, as its cache key sees them


def conv_model(seed: int = 0) -> bytes:
    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array(rng.standard_normal((16, 3, 3, 3)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])],
        "cached", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 8, 8])], initializer=[w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("RELAYISH_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _hit(module) -> bool:
    return module.meta["compile_info"]["cache"]["hit"]


def test_second_compile_is_a_cache_hit_with_the_same_outputs(cache_dir, tmp_path):
    path = tmp_path / "m.onnx"
    path.write_bytes(conv_model())
    first = compile_model(str(path), cache=True)
    second = compile_model(str(path), cache=True, num_threads=1)
    assert not _hit(first) and _hit(second) and second.num_threads == 1
    assert second.lib_path.startswith(str(cache_dir))
    feed = first.random_inputs()
    np.testing.assert_array_equal(first.run(None, feed)[0], second.run(None, feed)[0])
    assert _hit(compile_model(onnx.load(str(path)), cache=True))  # a ModelProto of the same bytes: the same key


def test_cache_off_neither_reads_nor_writes(cache_dir):
    assert "cache" not in compile_model(conv_model(), cache=False).meta["compile_info"]
    assert not cache_dir.exists()


def test_key_changes_with_every_part(tmp_path, monkeypatch):
    target = host_target()
    base = cache_module.cache_key(conv_model(), OPTIONS, None, target)
    assert base == cache_module.cache_key(conv_model(), dict(OPTIONS), None, dict(target))
    records = tmp_path / "records.db"
    records.write_bytes(b"schedules v1")
    with_records = cache_module.cache_key(conv_model(), OPTIONS, str(records), target)
    records.write_bytes(b"schedules v2")
    changed = [
        cache_module.cache_key(conv_model(seed=1), OPTIONS, None, target),  # model bytes (weights)
        cache_module.cache_key(conv_model(), dict(OPTIONS, layout="NCHW"), None, target),
        cache_module.cache_key(conv_model(), dict(OPTIONS, winograd=False), None, target),
        cache_module.cache_key(conv_model(), dict(OPTIONS, default_schedules="naive"), None, target),
        cache_module.cache_key(conv_model(), dict(OPTIONS, input_shapes={"x": [2, 3, 8, 8]}), None, target),
        with_records,
        cache_module.cache_key(conv_model(), OPTIONS, str(records), target),  # records content
        cache_module.cache_key(conv_model(), OPTIONS, None, dict(target, features=target["features"] + ",-avx")),
        cache_module.cache_key(conv_model(), OPTIONS, None, dict(target, cpu="other")),
    ]
    monkeypatch.setattr(cache_module, "source_hash", lambda: "another relayish")
    changed.append(cache_module.cache_key(conv_model(), OPTIONS, None, target))
    assert len({base, *changed}) == len(changed) + 1


def test_records_object_is_not_cached():
    class Store:
        def best(self, key):
            return None
    assert cache_module.cache_key(conv_model(), OPTIONS, Store(), host_target()) is None


@pytest.mark.parametrize("damage", ["library", "params", "metadata", "missing"])
def test_damaged_entry_is_rebuilt(cache_dir, damage):
    model = conv_model()
    compile_model(model, cache=True)
    key = cache_module.cache_key(model, OPTIONS, None, host_target())
    lib = cache_module.entry_path(key)
    target = {"library": lib, "params": lib + ".params", "metadata": lib + ".json", "missing": lib}[damage]
    if damage == "missing":
        os.unlink(target)
    else:
        with open(target, "r+b") as f:
            f.seek(10)
            f.write(b"\xff\x00garbage")
    rebuilt = compile_model(model, cache=True)
    assert not _hit(rebuilt) and rebuilt.meta["compile_info"]["cache"]["stored"]
    again = compile_model(model, cache=True)
    assert _hit(again)
    feed = again.random_inputs()
    np.testing.assert_array_equal(again.run(None, feed)[0], rebuilt.run(None, feed)[0])


def test_concurrent_compiles_leave_one_valid_entry(cache_dir):
    model, results, errors = conv_model(seed=2), [], []

    def compile_one():
        try:
            results.append(compile_model(model, cache=True))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=compile_one) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 3
    assert sorted(os.listdir(cache_dir)) == [cache_module.cache_key(model, OPTIONS, None, host_target())]
    assert _hit(compile_model(model, cache=True))


def test_store_keeps_an_entry_that_won_the_race(cache_dir):
    model = conv_model(seed=3)
    module = compile_model(model, cache=True)
    key = module.meta["compile_info"]["cache"]["key"]
    before = os.stat(cache_module.entry_path(key)).st_mtime_ns
    cache_module.store(key, module)  # as a second compile finishing late would
    assert os.stat(cache_module.entry_path(key)).st_mtime_ns == before
    assert sorted(os.listdir(cache_dir)) == [key]  # its temporary directory is gone


def test_key_covers_external_data_files(tmp_path):
    path = tmp_path / "ext.onnx"
    onnx.save_model(onnx.load_from_string(conv_model()), str(path), save_as_external_data=True,
                    all_tensors_to_one_file=True, location="weights.bin", size_threshold=0)
    before = cache_module.cache_key(str(path), OPTIONS, None, host_target())
    weights = tmp_path / "weights.bin"
    weights.write_bytes(weights.read_bytes() + b"\0" * 4)  # other weights (a new size and time)
    assert cache_module.cache_key(str(path), OPTIONS, None, host_target()) != before


def test_compile_model_keys_every_option(cache_dir):
    # the options compile_model passes to the key are all of its result-changing ones: a naive-schedule build
    # is never answered by the hand-written one's entry
    model = conv_model(seed=5)
    compile_model(model, cache=True)
    assert not _hit(compile_model(model, cache=True, default_schedules="naive"))
    assert _hit(compile_model(model, cache=True, default_schedules="naive"))


def test_options_as_one_object_key_the_cache_as_the_keywords_do(cache_dir):
    """compile_model's keywords make a CompileOptions; passing one directly is the same compile (the same cache
    entry), the enums take their old string spellings, and a bad value is named before anything compiles."""
    from compiler import CompileOptions, DefaultSchedules, Layout
    model = conv_model(seed=6)
    first = compile_model(model, cache=True, layout="NCHW", default_schedules="naive")
    options = CompileOptions(layout=Layout.NCHW, default_schedules=DefaultSchedules.NAIVE, cache=True)
    assert not _hit(first) and _hit(compile_model(model, options=options))
    assert options.layout == "NCHW" and options.default_schedules == "naive"  # str enums: old spellings still equal
    assert options.replace(opt_level=1).opt_level == 1 and options.opt_level == 3
    for bad, message in ((dict(default_schedules="fast"), r"default_schedules must be one of \['hand-written', "
                                                          r"'naive'\], got 'fast'"),
                         (dict(layout="NHWC"), r"layout must be one of \['NCHWc', 'NCHW'\]"),
                         (dict(opt_level=4), "opt_level must be an int from 0 to 3, got 4"),
                         (dict(num_threads=0), "num_threads must be a positive int or None, got 0")):
        with pytest.raises(ValueError, match=message):
            compile_model(model, **bad)
