"""The verdict on one mutant, from what onnxruntime and relayish did with it.

A side's outcome is an `Outcome`: it ran (outputs), or it raised (exception type, the module that defines the
type, message), or -- for relayish -- the worker died (crash) or ran out of time (hang).

Verdicts, in the order they are decided:
- CRASH / HANG: our side killed the worker or ran past the time limit (the worker is restarted).
- UNCLEAR: we raised an error that is not clear (`is_clear_error`).
- BOTH_REJECT: onnxruntime rejects the model (or its inputs) and so do we, clearly.
- GAP: onnxruntime runs it, we reject it clearly: a coverage gap, listed by `gap_reason`.
- ORT_REJECTS_WE_RUN: onnxruntime rejects it and we run it. Justified only by a row of JUSTIFIED (a class of
  models whose rejection by onnxruntime we knowingly do not follow, with the reason); otherwise UNJUSTIFIED.
- MATCH / WRONG: both ran; outputs of equal count and shapes, NaN at the same positions, +-inf equal, other values
  within RTOL of the largest |reference| -- or WRONG.
- ORT_OFF_REFERENCE: both ran and differ only in where NaN and +-inf fall (Inf weights times zero padding, say),
  and our outputs match onnx's own reference implementation (onnx.reference.ReferenceEvaluator, run in the worker
  only for such disagreements) exactly as MATCH would: the spec's answer is ours; listed, not a failure.
FAILURES are the verdicts that make a campaign fail.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

RTOL = 1e-4
FAILURES = ("CRASH", "HANG", "UNCLEAR", "WRONG", "UNJUSTIFIED")
OUR_PACKAGES = ("frontends", "relayish", "compiler", "runtime")
# Exception types that say nothing by themselves: from deep inside, they are unclear whatever their message says.
BARE_TYPES = {"IndexError", "KeyError", "AssertionError", "TypeError", "AttributeError", "ZeroDivisionError",
              "OverflowError", "RecursionError", "MemoryError", "UnboundLocalError", "NameError", "RuntimeError",
              "StopIteration", "NotImplementedError", "ValueError", "FloatingPointError", "LinAlgError",
              "AxisError", "OSError"}
# A clear message names where the problem is: the node, input, initializer, attribute or op.
_NAMES_CULPRIT = re.compile(r"\bnode\b|\binputs?\b|\binitializer\b|\boutputs?\b|\battribute\b|\bopset\b|"
                            r"\bop type|\bnn\.\w+|\bgraph\b|\bdims?\b|\bmodel\b")

# Models onnxruntime rejects and we run on purpose: (regex on onnxruntime's message, regex on the mutations,
# reason). Every other class found so far is now rejected by us too (frontends/onnx/).
JUSTIFIED: list[tuple[str, str, str]] = [
    (r"padding values must be non-negative", r"kernel_shape|strides|dilations|auto_pad|op_type",
     "SAME_UPPER/SAME_LOWER where the kernel is smaller than the stride: the spec's pad formula gives a negative "
     "total, which onnxruntime refuses at run time; we pad 0 (the windows fit the input, as TensorFlow's SAME) and "
     "output ceil(in / stride) positions, the spec's output shape"),
]


@dataclass
class Outcome:
    """What one side did: ran (outputs), raised (error_type, error_module, message), crashed or hung."""
    outputs: list | None = None
    error_type: str = ""
    error_module: str = ""  # the module that defines the exception's type
    raised_in: str = ""  # the module of the innermost traceback frame
    message: str = ""
    died: str = ""  # "crash: signal 11" / "hang: 60 s": the worker did not come back
    reference: list | None = None  # onnx's reference outputs, when ours and onnxruntime's differ in non-finites

    @property
    def ran(self) -> bool:
        return self.outputs is not None


@dataclass
class Verdict:
    kind: str
    reason: str = ""
    details: dict = field(default_factory=dict)


def _ours(module: str) -> bool:
    return module.split(".")[0] in OUR_PACKAGES


def is_clear_error(outcome: Outcome) -> bool:
    """Ours and clear: a type defined in one of our packages (OnnxImportError, ConversionError, OpError, ...), or
    a ValueError raised by our own code, with a message that names the node, input, initializer, attribute or op.
    A KeyError, IndexError, AssertionError, TypeError, numpy or LLVM error is never clear."""
    ours_type = _ours(outcome.error_module) and outcome.error_type not in BARE_TYPES
    our_value_error = outcome.error_type == "ValueError" and _ours(outcome.raised_in)
    return (ours_type or our_value_error) and bool(_NAMES_CULPRIT.search(outcome.message))


def gap_reason(message: str) -> str:
    """Our error message made into a class: without the model's name, node names, quoted names and numbers."""
    text = message.split("\n")[0]
    text = re.sub(r"^<[^>]*>: |^\S+\.onnx: ", "", text)
    text = re.sub(r"node (?:'[^']*'|#\d+ \(unnamed, output '[^']*'\)) \((\w+)\)", r"\1", text)
    text = re.sub(r"'[^']*'", "'…'", text)
    text = re.sub(r"\([^()]*\)", "(…)", text)
    text = re.sub(r"-?\d+", "N", text)
    return text[:140]


def compare(ours: list, ref: list) -> str:
    """'' if ours matches ref (count, shapes, NaN positions, infinities, values within RTOL), else why not."""
    if len(ours) != len(ref):
        return f"{len(ours)} outputs, onnxruntime has {len(ref)}"
    for k, (a, b) in enumerate(zip(ours, ref)):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape:
            return f"output {k}: shape {a.shape}, onnxruntime {b.shape}"
        if a.dtype.kind != "f" or b.dtype.kind != "f":
            if not np.array_equal(a, b):
                return f"output {k}: values differ"
            continue
        nan_a, nan_b = np.isnan(a), np.isnan(b)
        if not np.array_equal(nan_a, nan_b):
            return f"output {k}: {int(nan_a.sum())} NaN, onnxruntime {int(nan_b.sum())} (positions differ)"
        inf_a, inf_b = np.isinf(a), np.isinf(b)
        if not np.array_equal(inf_a, inf_b) or not np.array_equal(a[inf_a], b[inf_b]):
            return f"output {k}: infinities differ"
        finite = np.isfinite(b)
        if finite.any():
            scale = max(float(np.abs(b[finite]).max()), 1e-30)
            err = float(np.abs(a[finite].astype(np.float64) - b[finite]).max()) / scale
            if err > RTOL:
                return f"output {k}: relative error {err:.3g} > {RTOL}"
    return ""


def judge(ort: Outcome, ours: Outcome, mutations: list[str]) -> Verdict:
    """The verdict on one mutant (module docstring)."""
    if ours.died:
        return Verdict("HANG" if ours.died.startswith("hang") else "CRASH", ours.died)
    if not ours.ran and not is_clear_error(ours):
        return Verdict("UNCLEAR", f"{ours.error_type} ({ours.error_module}): {ours.message[:300]}")
    if not ort.ran and not ours.ran:
        return Verdict("BOTH_REJECT", gap_reason(ours.message))
    if ort.ran and not ours.ran:
        return Verdict("GAP", gap_reason(ours.message))
    if not ort.ran:
        text = " ".join(mutations)
        for ort_pattern, mutation_pattern, reason in JUSTIFIED:
            if re.search(ort_pattern, ort.message) and re.search(mutation_pattern, text):
                return Verdict("ORT_REJECTS_WE_RUN", reason)
        return Verdict("UNJUSTIFIED", f"onnxruntime: {ort.error_type}: {ort.message[:300]}")
    why = compare(ours.outputs, ort.outputs)
    if why and ours.reference is not None and not compare(ours.outputs, ours.reference):
        return Verdict("ORT_OFF_REFERENCE", "onnxruntime's NaN/Inf positions depart from the ONNX reference "
                                            "implementation's, and ours match it")
    return Verdict("WRONG", why) if why else Verdict("MATCH")


def nonfinite_disagreement(ours: list, ref: list) -> bool:
    """Both ran with outputs of the same shapes that differ in where NaN or +-inf fall."""
    if len(ours) != len(ref):
        return False
    for a, b in zip(ours, ref):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape or a.dtype.kind != "f" or b.dtype.kind != "f":
            continue
        if not np.array_equal(np.isnan(a), np.isnan(b)) or not np.array_equal(np.isinf(a), np.isinf(b)):
            return True
    return False
