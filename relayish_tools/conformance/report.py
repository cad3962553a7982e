"""Counting, grouping and printing results; the JSON report.

Failures are grouped by reason: the first line of the message with what varies from case to case (the model's
name, node and input names, shapes) taken out, so that e.g. every "opset 22 is not supported" is one group.
"""
from __future__ import annotations

import json
import re
from collections import Counter, defaultdict

from .engines import STATUSES, CaseResult


def counts(results: list[CaseResult]) -> dict[str, int]:
    found = Counter(r.status for r in results)
    return {status: found.get(status, 0) for status in STATUSES}


def reason(result: CaseResult) -> str:
    """The message reduced to what it has in common with the same failure of other cases."""
    text = result.message
    ops = re.findall(r"^\s+(\S+) \((\S+) v\d+\): \d+ node", text, flags=re.M)
    if ops:  # the importer's list of unsupported op types
        return "unsupported op type(s): " + ", ".join(f"{op}" + ("" if d == "ai.onnx" else f" ({d})")
                                                      for op, d in ops)
    text = text.splitlines()[0] if text else ""
    text = re.sub(r"<ModelProto [^>]*>: ", "", text)
    text = re.sub(r"node (?:'[^']*'|#\d+ \(unnamed, output '[^']*'\)) ", "node ", text)
    text = re.sub(r"'[^']*'", "'*'", text)
    text = re.sub(r"\((?:\d+, )*\d*\)|\[(?:\d+, )*\d*\]", "(*)", text)
    return text[:200]


def groups(results: list[CaseResult]) -> list[tuple[str, str, list[str]]]:
    """(status, reason, case names) for every failure, the largest groups first."""
    found: dict[tuple[str, str], list[str]] = defaultdict(list)
    for r in results:
        if r.status != "pass":
            found[(r.status, reason(r))].append(r.name)
    return sorted(((s, why, names) for (s, why), names in found.items()), key=lambda g: (-len(g[2]), g[0], g[1]))


def summary_line(results: list[CaseResult]) -> str:
    return "  ".join(f"{status} {n}" for status, n in counts(results).items())


def format_report(engine: str, results: list[CaseResult], seconds: float, show: int = 4) -> str:
    """The counts, then each failure group (count, status, reason, its first `show` cases); every wrong or crashed
    case is listed by name."""
    lines = [f"{engine}: {len(results)} cases in {seconds:.0f} s", f"  {summary_line(results)}"]
    failing = groups(results)
    if failing:
        lines.append("failures by reason (count, status, reason: first cases):")
    for status, why, names in failing:
        full = status in ("wrong", "crash")
        listed = ", ".join(names if full else names[:show]) + ("" if full or len(names) <= show else ", ...")
        lines.append(f"  {len(names):5d} {status:11s} {why}: {listed}")
    return "\n".join(lines)


def write_json(path: str, engine: str, results: list[CaseResult], seconds: float):
    report = {"engine": engine, "seconds": round(seconds, 1), "counts": counts(results),
              "groups": [{"status": s, "reason": why, "cases": names} for s, why, names in groups(results)],
              "cases": [{"name": r.name, "ops": list(r.ops), "status": r.status, "message": r.message,
                         "seconds": round(r.seconds, 3)} for r in results]}
    with open(path, "w") as f:
        json.dump(report, f, indent=1)
