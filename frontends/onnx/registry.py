"""The converter registry: one small converter per ONNX op, ONNX inputs as positional arguments, ONNX attributes
as keyword arguments with their ONNX defaults. A converter returns the relayish expression of the node's first
output (or a tuple, one per output it supports).

Opset differences are an explicit table: `@converter("Squeeze", since=13)` registers the form used from opset 13
on; the importer picks, for a model's opset, the registration with the largest `since` not above it. Ops of other
domains than ai.onnx register with `domain=` (com.microsoft, ai.onnx.ml, ...), `since` then counting in that
domain's versions.

Inputs arrive as relayish expressions (initializers and folded values as `Constant`s), or None for an omitted
optional input. Computations whose inputs are all constants (the int64 shape arithmetic of exported models) are
folded at import with numpy (frontends/onnx/builders.py), so they never reach the graph. A converter that cannot
handle its node raises ConversionError; the importer adds the node's name and op type. The converters themselves
are in frontends/onnx/ops/, one module per op family.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Converter:
    """One registration: the function and what the importer checks a node against before calling it."""
    op_type: str
    since: int
    fn: Callable
    inputs: tuple[str, ...]  # positional parameter names, for messages
    required_inputs: int  # the first this many inputs must be given
    variadic: bool  # takes *inputs
    attrs: frozenset[str]  # keyword-only parameters = the ONNX attributes the converter knows
    required_attrs: frozenset[str]


_CONVERTERS: dict[str, list[Converter]] = {}  # the default domain (ai.onnx)
# other domains by name: com.microsoft, onnxruntime's contrib ops (frontends/onnx/ops/contrib*.py)
_DOMAIN_CONVERTERS: dict[str, dict[str, list[Converter]]] = {}
DEFAULT_DOMAINS = ("", "ai.onnx")


def _table(domain: str) -> dict[str, list[Converter]]:
    return _CONVERTERS if domain in DEFAULT_DOMAINS else _DOMAIN_CONVERTERS.setdefault(domain, {})


def converter(op_type: str, since: int = 1, domain: str = ""):
    """Register fn as the converter of op_type for opsets >= since (until a later registration takes over);
    `domain`: the op's domain (default: ai.onnx), whose own opset version `since` then counts in."""
    def register(fn):
        params = inspect.signature(fn).parameters.values()
        kw = [p for p in params if p.kind is p.KEYWORD_ONLY]
        table = _table(domain)
        table.setdefault(op_type, []).append(Converter(
            op_type, since, fn,
            inputs=tuple(p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD),
            required_inputs=sum(p.kind is p.POSITIONAL_OR_KEYWORD and p.default is p.empty for p in params),
            variadic=any(p.kind is p.VAR_POSITIONAL for p in params),
            attrs=frozenset(p.name for p in kw),
            required_attrs=frozenset(p.name for p in kw if p.default is p.empty)))
        table[op_type].sort(key=lambda c: c.since)
        return fn
    return register


def lookup_converter(op_type: str, opset: int, domain: str = "") -> Converter | None:
    """The converter of op_type at this opset of its domain (default: ai.onnx), or None if the op is unsupported
    there."""
    found = None
    for conv in (_CONVERTERS if domain in DEFAULT_DOMAINS else _DOMAIN_CONVERTERS.get(domain, {})).get(op_type, ()):
        if conv.since <= opset:
            found = conv
    return found


def supported_ops(domain: str = "") -> list[str]:
    """The op types with a converter in `domain` (default: ai.onnx)."""
    return sorted(_CONVERTERS if domain in DEFAULT_DOMAINS else _DOMAIN_CONVERTERS.get(domain, {}))
