"""Differential fuzzing of relayish against onnxruntime, on mutated small models.

    python -m relayish_tools.fuzz --mutants 2000 --seed 0 --workers 2 --out report.json

- `seeds.py`: small valid models (conv/bn/relu/pool/gemm, residual add, concat, depthwise conv,
  reshape/transpose/softmax, matmul, pools) built with onnx.helper.
- `mutators.py`: edits that keep a model parseable: attribute values, initializer dims/dtypes/data, graph input
  shapes, rewired or dangling inputs, dropped initializers, unknown attributes, other opsets, duplicate names,
  auto_pad with explicit pads, swapped op types.
- `runner.py`: a small pool of spawned worker processes with an address-space limit (RLIMIT_AS) and a time limit
  per mutant; each worker runs many mutants through onnxruntime and through relayish on the same seeded inputs
  and is restarted after a crash or hang (the parent records the mutant that killed it).
- `verdict.py`: the verdict on each mutant (both reject, coverage gap, we run what onnxruntime rejects --
  justified or not --, match, wrong, unclear error, crash, hang).
- `campaign.py`, `__main__.py`: N mutants, the summary, the reproducers (.onnx) of every failure.

Why a seeded random mutator of our own, not hypothesis or atheris: the input space is "a valid model plus a few
structural edits", which a handful of protobuf-aware mutators express directly; a mutant is a pure function of
(campaign seed, index), so any line of a report is reproduced by `--first I --mutants 1` without a database;
every mutant must run in a child process with memory and time limits, which fits neither hypothesis's in-process
shrinking loop nor atheris's in-process coverage feedback (which instruments Python but not LLVM's or
onnxruntime's native code, where the crashes we look for would happen). Shrinking is not needed: a mutant is one
to two edits of a 3-6 node model.

fuzz may import every package except the CLI (README's "Layout of the code").
"""
