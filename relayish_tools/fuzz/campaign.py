"""A campaign: N mutants of the seed models, run in the worker pool, judged, summarized.

Mutant i of a campaign with seed S is a pure function of (S, i): `make_mutant(S, i)` picks the seed model and
1-3 mutations with `np.random.default_rng([S, i])`, so a summary line `#i` can be rebuilt without its .onnx file.
"""
from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from .mutators import mutate
from .runner import Job, run_jobs
from .seeds import seed_models
from .verdict import FAILURES, Outcome, judge

_SEEDS = None


def make_mutant(seed: int, index: int) -> tuple[str, onnx.ModelProto, list[str]]:
    """(seed model name, mutant, mutations) of mutant `index` of campaign `seed`."""
    global _SEEDS
    if _SEEDS is None:
        _SEEDS = seed_models()
    rng = np.random.default_rng([seed, index])
    name = sorted(_SEEDS)[int(rng.integers(len(_SEEDS)))]
    mutant, mutations = mutate(_SEEDS[name], rng, count=1 + int(rng.integers(3)) // 2)
    return name, mutant, mutations


@dataclass
class Report:
    seed: int
    mutants: int
    counts: Counter = field(default_factory=Counter)
    gaps: Counter = field(default_factory=Counter)  # coverage gap reason -> count
    justified: Counter = field(default_factory=Counter)
    failures: list = field(default_factory=list)  # dicts: index, verdict, reason, seed model, mutations, file
    restarts: int = 0
    seconds: float = 0.0

    @property
    def failed(self) -> int:
        return sum(self.counts[k] for k in FAILURES)

    def as_dict(self) -> dict:
        return {"seed": self.seed, "mutants": self.mutants, "seconds": round(self.seconds, 1),
                "worker_restarts": self.restarts, "counts": dict(self.counts), "gaps": dict(self.gaps),
                "justified": dict(self.justified), "failures": self.failures}

    def summary(self) -> str:
        lines = [f"fuzz: {self.mutants} mutants, seed {self.seed}, {self.seconds:.0f} s, "
                 f"{self.restarts} worker restart(s)",
                 "verdicts: " + ", ".join(f"{k} {v}" for k, v in sorted(self.counts.items()))]
        if self.gaps:
            lines.append(f"coverage gaps (onnxruntime runs, we reject clearly), {len(self.gaps)} reason(s):")
            lines += [f"  {n:5d}  {reason}" for reason, n in self.gaps.most_common()]
        for reason, n in self.justified.most_common():
            lines.append(f"  justified ({n}): {reason}")
        for f in self.failures:
            lines.append(f"{f['verdict']} #{f['index']} ({f['seed_model']}: {'; '.join(f['mutations'])}): "
                         f"{f['reason']} -> {f['file']}")
        lines.append(f"{'FAIL' if self.failed else 'OK'}: {self.failed} crash/hang/wrong/unclear/unjustified")
        return "\n".join(lines)


def run_campaign(mutants: int, seed: int = 0, workers: int = 2, out_dir: str | Path = "fuzz_out",
                 timeout_s: float = 60.0, memory_bytes: int = 4 << 30, first: int = 0) -> Report:
    """Run mutants first .. first+mutants-1; reproducers of failures go to out_dir as .onnx (+ .json)."""
    out = Path(out_dir)
    report = Report(seed, mutants)
    info = {}
    jobs = []
    for index in range(first, first + mutants):
        name, mutant, mutations = make_mutant(seed, index)
        info[index] = (name, mutations)
        jobs.append(Job(index, mutant.SerializeToString(), feed_seed=index))
    models = {j.index: j.model for j in jobs}

    def record(job: Job, ort: Outcome, ours: Outcome):
        name, mutations = info[job.index]
        verdict = judge(ort, ours, mutations)
        report.counts[verdict.kind] += 1
        if verdict.kind == "GAP":
            report.gaps[verdict.reason] += 1
        elif verdict.kind in ("ORT_REJECTS_WE_RUN", "ORT_OFF_REFERENCE"):
            report.justified[verdict.reason] += 1
        elif verdict.kind in FAILURES:
            out.mkdir(parents=True, exist_ok=True)
            path = out / f"{verdict.kind.lower()}_{seed}_{job.index}.onnx"
            path.write_bytes(models[job.index])
            entry = {"index": job.index, "verdict": verdict.kind, "reason": verdict.reason, "seed_model": name,
                     "mutations": mutations, "file": str(path),
                     "onnxruntime": ort.message[:500] if not ort.ran else "ran"}
            path.with_suffix(".json").write_text(json.dumps(entry, indent=1))
            report.failures.append(entry)

    t0 = time.monotonic()
    report.restarts = run_jobs(jobs, record, workers=workers, timeout_s=timeout_s, memory_bytes=memory_bytes)
    report.seconds = time.monotonic() - t0
    report.failures.sort(key=lambda f: f["index"])
    return report
