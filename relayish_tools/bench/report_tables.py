"""The tables of docs/benchmarks.md, one function per benchmark: its JSON (as the benchmark's command wrote it) ->
a Table of rows, notes and provenance. bench/report_docs.py lists the benchmarks and renders the page; a field a
table needs and its JSON lacks is a ReportError naming the file and the field.
"""
from __future__ import annotations

from dataclasses import dataclass, field


class ReportError(ValueError):
    """A data file that cannot make its table: names the file (and row) and the missing or malformed field."""


def need(data, path: str, where: str):
    """data's value at the dotted `path` ("ratios.relayish/onnxruntime"); a missing key is a ReportError."""
    value = data
    for key in path.split("."):
        if not isinstance(value, dict) or key not in value:
            raise ReportError(f"{where}: missing field {path!r}")
        value = value[key]
    return value


def number(data, path: str, where: str) -> float:
    value = need(data, path, where)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ReportError(f"{where}: field {path!r} must be a number, got {value!r}")
    return value


@dataclass(frozen=True)
class Table:
    header: list[str]
    rows: list[list[str]]
    notes: list[str] = field(default_factory=list)  # sentences printed under the table
    provenance: list[tuple[str, dict]] = field(default_factory=list)  # (what it covers, dict with provenance keys)


# ---------------------------------------------------------------------------------------------- formatting

def ms(v) -> str:
    return "-" if v is None else f"{v:.1f}" if v >= 100 else f"{v:.2f}" if v >= 1 else f"{v:.3f}"


def paired(p: dict, where: str) -> str:
    """"0.72 [0.70-0.74]" from a paired_ratio dict."""
    return f"{number(p, 'ratio', where):.2f} [{number(p, 'low', where):.2f}-{number(p, 'high', where):.2f}]"


# ---------------------------------------------------------------------------------------------- the tables

def quickstart_table(data: dict, where: str) -> Table:
    """`relayish bench MODEL --json FILE` (bench/report.py bench_report)."""
    rows = []
    for i, e in enumerate(need(data, "engines", where)):
        w = f"{where} engines[{i}]"
        rows.append([need(e, "name", w)] + [ms(number(e, k, w)) for k in ("median_ms", "p90_ms", "p99_ms", "min_ms")]
                    + [str(number(e, "runs", w))])
    p = need(data, "paired_ratios.relayish/onnxruntime", where)
    outputs = need(data, "accuracy.outputs", where)
    worst = max((number(o, "max_rel", f"{where} accuracy.outputs.{n}") for n, o in outputs.items()), default=0.0)
    timing = need(data, "configuration.timing", where)
    notes = [f"relayish / onnxruntime: **{number(data, 'ratios.relayish/onnxruntime', where):.2f}x** by medians, "
             f"paired {paired(p, where)} over {number(p, 'rounds', where)} rounds; max relative error {worst:.1e} "
             f"({'within' if need(data, 'accuracy.passed', where) else 'OUTSIDE'} the tolerance). "
             f"{need(data, 'model.path', where)}: {number(data, 'model.kernels', where)} kernels; "
             f"{number(data, 'configuration.threads', where)} threads, {need(timing, 'mode', where)} timing, "
             f"{number(timing, 'runs', where)} timed runs per engine."]
    return Table(["engine", "median ms", "P90 ms", "P99 ms", "min ms", "timed runs"], rows, notes, [("", data)])


def engine_cells(r: dict, w: str) -> list[str]:
    """A suite row's cells that suite_table and int8_table share: relayish ms, onnxruntime ms, OpenVINO ms (or why
    there is none), relayish / onnxruntime in bold, its paired ratio, OpenVINO / onnxruntime, then the maximum
    relative error (and whether the outputs agree)."""
    if "openvino" in r:
        ov = [ms(number(r, "openvino.median_ms", w)), f"{number(r, 'openvino_ratio', w):.2f}"]
    else:
        ov = [f"error: {r['openvino_error']}" if "openvino_error" in r else "not installed", "-"]
    return [ms(number(r, "relayish.median_ms", w)), ms(number(r, "onnxruntime.median_ms", w)), ov[0],
            f"**{number(r, 'ratio', w):.2f}**", paired(need(r, "paired", w), w), ov[1],
            f"{number(r, 'max_rel_error', w):.1e}" + ("" if need(r, "agree", w) else " DISAGREES")]


def suite_table(data: dict, where: str) -> Table:
    """`python -m relayish_tools.bench.suite DIR --json FILE`."""
    rows = []
    for i, r in enumerate(need(data, "rows", where)):
        w = f"{where} rows[{i}]"
        name = need(r, "model", w)
        if "error" in r:
            rows.append([name, f"error: {r['error']}"] + ["-"] * 7)
            continue
        cells = engine_cells(r, w)
        ov_paired = paired(need(r, "openvino_paired", w), w) if "openvino" in r else "-"
        rows.append([name] + cells[:6] + [ov_paired, cells[6]])
    c = need(data, "configuration", where)
    notes = [f"{number(c, 'threads', where)} threads per engine, {number(c, 'repeat', where)} timed runs per engine "
             f"in blocks of {number(c, 'block', where)}. OpenVINO runs in fp32 (`pip install -e '.[bench]'`); the "
             "error column is max |relayish - onnxruntime| / max |onnxruntime| over the outputs."]
    return Table(["model", "relayish ms", "onnxruntime ms", "OpenVINO ms", "relayish / ort", "paired [90%]",
                  "OpenVINO / ort", "paired [90%]", "max rel. error"], rows, notes, [("", data)])


def int8_table(data: dict, where: str) -> Table:
    """`python -m relayish_tools.bench.int8_suite DIR --json FILE`: suite_table's timings, then accuracy against
    onnxruntime's int8 result and top-1 agreement with the float model."""
    rows = []
    share = lambda v: "-" if v is None else f"{100 * v:.0f}%"  # noqa: E731
    for i, r in enumerate(need(data, "rows", where)):
        w = f"{where} rows[{i}]"
        name = need(r, "model", w)
        if "error" in r:
            rows.append([name, f"error: {r['error']}"] + ["-"] * 8)
            continue
        rows.append([name] + engine_cells(r, w) + [f"{share(r.get('top1_vs_float'))} / "
                                                   f"{share(r.get('ort_top1_vs_float'))}",
                                                   share(need(r, "top1_vs_ort", w))])
    c = need(data, "configuration", where)
    notes = [f"{number(c, 'threads', where)} threads per engine, {number(c, 'repeat', where)} timed runs per engine "
             f"in blocks of {number(c, 'block', where)}; onnxruntime and OpenVINO run the same int8 model. Error: "
             "max |relayish - onnxruntime int8| / max |onnxruntime int8| over the outputs and "
             f"{number(c, 'seeds', where)} seeded inputs (agreement: within {number(data, 'tolerance', where):g}, a few "
             "quantization steps). Top-1: the share of rows (images; a decoder's tokens) whose argmax is the float "
             "model's (onnxruntime fp32 on the model before quantization), relayish / onnxruntime int8 (random "
             "weights: logits close together, so quantization alone flips some); then relayish's against onnxruntime "
             "int8's."]
    return Table(["model", "relayish ms", "ort int8 ms", "OpenVINO ms", "relayish / ort", "paired [90%]",
                  "OpenVINO / ort", "error vs ort int8", "top-1 = float (ours / ort)", "top-1 = ort int8"], rows,
                 notes, [("", data)])


def payoff_table(data: list, where: str) -> Table:
    """payoff/payoff.json of `python -m relayish_tools.bench.payoff` (a list of rows, each measured by its own run)."""
    if not isinstance(data, list):
        raise ReportError(f"{where}: expected a list of rows (payoff.json), got {type(data).__name__}")
    rows, prov = [], []
    for i, r in enumerate(data):
        w = f"{where} rows[{i}]"
        name = need(r, "model", w)
        untuned, tuned, ort = (number(r, k, w) for k in ("untuned_ms", "tuned_ms", "onnxruntime_ms"))
        kept, reverted = need(r, "kept", w), need(r, "reverted", w)
        rows.append([name, f"{number(r, 'minutes', w):g}", str(number(r, "trials", w)), ms(untuned), ms(tuned),
                     ms(ort), f"{tuned / untuned:.2f}", paired(need(r, "paired.tuned/untuned", w), w),
                     f"{tuned / ort:.2f}", ms(number(r, "estimated_ms", w)),
                     "-" if kept is None else f"{kept} / {reverted}",
                     f"{number(r, 'max_rel_error', w):.1e}" + ("" if need(r, "agree", w) else " DISAGREES")])
        prov.append((name, r))
    notes = ["Tuned from the hand-written schedules for the given minutes; the model check at the end keeps a task's "
             "default when its tuned program is not faster inside the model, and every default when the tuned model "
             "is not faster end to end. \"estimate\": the tuner's sum over kernel calls of each program's median "
             "reading."]
    return Table(["model", "minutes", "programs", "untuned ms", "tuned ms", "onnxruntime ms", "tuned / untuned",
                  "paired [90%]", "tuned / ort", "estimate ms", "tasks kept / reverted", "max rel. error"], rows,
                 notes, prov)


def crossing(curve: list, target_ms: float, where: str) -> str:
    """The tuning time (s) at which the curve's estimate first reached target_ms, or "never"."""
    for i, point in enumerate(curve):
        if not isinstance(point, list) or len(point) != 3:
            raise ReportError(f"{where}: curve[{i}] must be [programs, seconds, estimate ms], got {point!r}")
        if point[2] is not None and point[2] <= target_ms:
            return f"{point[1]:.0f} s ({point[0]} programs)"
    return "never"


def template_free_table(data: dict, where: str) -> Table:
    """`python -m relayish_tools.bench.template_free MODEL --json FILE`."""
    builds = ("hand-written", "naive", "tuned from naive")
    estimates = {"hand-written": "hand-written", "naive": "naive", "tuned from naive": "tuned"}
    rows = [[b, ms(number(data, f"end_to_end_ms.{b}", where)), ms(number(data, f"estimate_ms.{estimates[b]}", where))]
            for b in builds]
    hand_ms = number(data, "estimate_ms.hand-written", where)
    e2e = need(data, "end_to_end_ms", where)
    p = need(data, "paired_tuned_over_hand_written", where)
    curve = need(data, "curve", where)
    notes = [f"{need(data, 'model', where)}: tuned from the naive loop nests, {number(data, 'trials', where)} "
             f"programs in {number(data, 'seconds', where):.0f} s. Tuned / hand-written end to end: "
             f"**{e2e['tuned from naive'] / e2e['hand-written']:.2f}x** by medians, paired {paired(p, where)} over "
             f"{number(p, 'rounds', where)} rounds. The estimate came within 1.1x of the hand-written estimate "
             f"after {crossing(curve, 1.1 * hand_ms, where)} and reached it after {crossing(curve, hand_ms, where)}."]
    return Table(["build", "end to end ms", "estimate ms"], rows, notes, [("", data)])


def tune_compare_table(data: dict, where: str) -> Table:
    """`relayish tune-compare MODEL --json FILE` (bench/report.py tune_compare_report)."""
    within = number(data, "within", where)
    rows = []
    for i, s in enumerate(need(data, "strategies", where)):
        w = f"{where} strategies[{i}]"
        start, final = number(s, "start_ms", w), number(s, "final_ms", w)
        reach = need(s, "trials_to_within", w)
        rows.append([need(s, "name", w), ms(start), ms(final), f"{(1 - final / start):.1%}",
                     str(number(s, "trials", w)), f"{number(s, 'seconds', w):.0f}",
                     "never" if reach is None else str(reach), str(number(s, "failed", w))])
    notes = [f"{need(data, 'model', where)}: every strategy starts from the default schedules, measured once for all "
             "(\"start\"); the estimate is the sum over kernel calls of each task's best program, timed with cold "
             "caches as inside the model."]
    return Table(["strategy", "start ms", "final estimate ms", "gain", "programs", "seconds",
                  f"programs to within {within:.0%} of the best", "failed programs"], rows, notes, [("", data)])


def ratio_cell(v) -> str:
    return "-" if v is None else f"{v:.2f}"


def shapes_table(data: dict, where: str) -> Table:
    """`python -m relayish_tools.bench.shapes --json FILE`: one row per op class, then all classes."""
    rows = []
    for i, s in enumerate(need(data, "summary", where)):
        w = f"{where} summary[{i}]"
        rows.append([need(s, "class", w), str(number(s, "cases", w)), str(number(s, "failures", w)),
                     f"**{ratio_cell(need(s, 'geomean', w))}**", ratio_cell(need(s, "p90", w)),
                     ratio_cell(need(s, "worst", w)), f"`{need(s, 'worst_shape', w) or '-'}`"])
    notes = [f"Seed {number(data, 'seed', where)}, {number(data, 'n', where)} shapes per class, "
             f"{number(data, 'threads', where)} threads, median of {number(data, 'repeat', where)} runs per engine "
             "and case; ratios are relayish / onnxruntime (below 1: relayish faster), untuned; every case's outputs "
             "are checked against onnxruntime (a failure is a case that did not compile or disagreed)."]
    return Table(["op class", "cases", "failures", "geomean", "P90", "worst", "worst shape"], rows, notes,
                 [("", data)])


def _one_node_table(data: dict, where: str, head: list, extra, checked: str) -> Table:
    """A table of one-node cases timed beside onnxruntime (bench.rnn, bench.nms): per case its shape, extra(case,
    where) cells, both medians and their ratio (or why it failed); `checked` says how outputs were judged."""
    rows = []
    for i, r in enumerate(need(data, "cases", where)):
        w = f"{where} cases[{i}]"
        cells = [need(r, "shape", w)] + extra(r, w)
        if need(r, "ratio", w) is None:
            rows.append(cells + ["-", "-", f"failed: {r.get('error')}"])
            continue
        rows.append(cells + [ms(number(r, "ours_ms", w)), ms(number(r, "ort_ms", w)),
                             f"**{number(r, 'ratio', w):.2f}**"])
    notes = [f"{number(data, 'threads', where)} threads, median of {number(data, 'repeat', where)} runs per engine; "
             f"{checked}."]
    return Table(head + ["relayish ms", "onnxruntime ms", "relayish / ort"], rows, notes, [("", data)])


def rnn_table(data: dict, where: str) -> Table:
    """`python -m relayish_tools.bench.rnn --json FILE`: one row per recurrent layer."""
    return _one_node_table(data, where, ["layer"], lambda r, w: [], "outputs checked against onnxruntime")


def nms_table(data: dict, where: str) -> Table:
    """`python -m relayish_tools.bench.nms --json FILE`: one row per case."""
    return _one_node_table(data, where, ["boxes, classes, share above the score threshold", "kept"],
                           lambda r, w: [str(need(r, "kept", w))], "the kept indices checked equal to onnxruntime's")


def dynamic_table(data: dict, where: str) -> Table:
    """`python -m relayish_tools.bench.dynamic --json FILE`: one row per model and shape."""
    rows = []
    for i, case in enumerate(need(data, "cases", where)):
        w = f"{where} cases[{i}]"
        for j, r in enumerate(need(case, "rows", w)):
            wr = f"{w} rows[{j}]"
            ort, generic = number(r, "ort_ms", wr), r.get("generic_ms")
            rows.append([need(case, "model", w) if j == 0 else "", "x".join(str(d) for d in need(r, "shape", wr)),
                         ms(number(r, "first_ms", wr)),
                         f"{ms(generic)} ({generic / ort:.2f}x)" if generic else "-",
                         f"{ms(number(r, 'specialized_ms', wr))} (**{number(r, 'specialized_ms', wr) / ort:.2f}x**)",
                         ms(ort)])
        s = need(case, "summary", w)
        g = s.get("generic_vs_ort")
        first = f"new shapes: worst {number(s, 'worst_first_vs_steady', w):.1f}x steady"
        if "static_first_vs_steady" in s:
            first += (f"; the session's first {number(s, 'session_first_vs_steady', w):.1f}x (a static compile's "
                      f"{s['static_first_vs_steady']:.1f}x, onnxruntime's {number(s, 'ort_first_vs_steady', w):.1f}x)")
        rows.append(["", "geomean", first, f"{g:.2f}x" if g else "-",
                     f"**{number(s, 'specialized_vs_ort', w):.2f}x**", ""])
    notes = [f"{number(data, 'threads', where)} threads, median of {number(data, 'repeat', where)} runs per engine. "
             "First: the first call of a shape the session had not seen (the generic tier, or a compile where the "
             "model has none), right after a call of the shape before; the first shape's is the session's first "
             "call, its caches cold, as those of a static compile's first call and of a new onnxruntime "
             "session's (their first call over their steady time beside it). Generic: the batch-1 module item by "
             "item for a free batch, else the kernels with run-time extents (one library for every size, default "
             "schedules made for a typical size); specialized: the module compiled for that shape; ratios against onnxruntime."]
    return Table(["model", "shape", "first call ms", "generic ms", "specialized ms", "onnxruntime ms"], rows,
                 notes, [("", data)])


def free_dims_table(data: dict, where: str) -> Table:
    """`python -m relayish_tools.bench.free_dims DIR --json FILE`: one row per model and free dim."""
    from relayish_tools.bench.free_dims import row_status
    rows, status, previous = [], [], None
    for i, r in enumerate(need(data, "rows", where)):
        w = f"{where} rows[{i}]"
        model = need(r, "model", w)
        sizes = need(r, "sizes", w)
        if "error" in r or "ort_error" in r:
            cells, state = [r.get("error") or f"onnxruntime: {r['ort_error']}", "-", "-"], "error"
        elif not sizes:
            cells, state = ["onnxruntime runs no other size", "-", "-"], "base only"
        else:
            state = row_status(r)
            cells = [", ".join(str(need(e, "size", w)) for e in sizes),
                     ", ".join(f"{e['max_rel_error']:.0e}" if "max_rel_error" in e else "error" for e in sizes),
                     ", ".join(f"{e['first_ms']:.0f}" if "first_ms" in e else "-" for e in sizes)]
        status.append(state)
        rows.append([model if model != previous else "", f"{need(r, 'dim', w)} ({number(r, 'base', w):.0f})",
                     *cells, f"**{state}**" if state != "pass" else state])
        previous = model
    checked = [s for s in status if s != "base only"]
    notes = [f"{checked.count('pass')} of {len(checked)} free dims match onnxruntime within "
             f"{number(data, 'tolerance', where):.0e} at every size tried"
             + (f" ({checked.count('as static')} err as the static compile for that shape does, no more: int8 "
                "rounding)" if "as static" in checked else "")
             + f"; {status.count('base only')} dim(s) onnxruntime runs at no size but the base (the export bakes it). "
             "Each size is one the session was never compiled for: its first call runs it on the generic tier "
             "where the model has one (a free batch item by item, other free dims on kernels with run-time "
             "extents: first calls of milliseconds), else compiles it (seconds). Error: max |ours - onnxruntime| / "
             "max |onnxruntime| over the outputs."]
    return Table(["model", "free dim (base)", "sizes", "error", "first call ms", "status"], rows, notes,
                 [("", data)])


def zero_shot_table(data: dict, where: str) -> Table:
    """`python -m relayish_tools.bench.pretrain zero-shot --json FILE`: one row per model."""
    rows = []
    for i, r in enumerate(need(data, "rows", where)):
        w = f"{where} rows[{i}]"
        rows.append([need(r, "model", w), f"{number(r, 'predicted_tasks', w):.0f} of {number(r, 'tasks', w):.0f}",
                     ms(number(r, "untuned.median_ms", w)), ms(number(r, "zero_shot.median_ms", w)),
                     ms(number(r, "onnxruntime.median_ms", w)), f"**{number(r, 'zero_shot_vs_untuned', w):.2f}**"])
    trained = need(data, "cost_model.trained_on", where)
    notes = [f"The cost model: trained on {number(trained, 'programs', where):.0f} measured programs of "
             f"{number(trained, 'tasks', where):.0f} tasks of {', '.join(need(trained, 'models', where))}; held out "
             f"whole: {', '.join(need(trained, 'held_out', where)) or 'none'}."]
    held = data.get("held_out")
    if held and held.get("pairwise_accuracy") is not None:
        notes.append(f"On the {held['held_out_tasks']} tasks only the held-out models have, it orders "
                     f"{held['pairwise_accuracy']:.0%} of the pairs of measured programs right (random: 50%).")
    notes.append(f"{number(data, 'threads', where):.0f} threads, median of {number(data, 'repeat', where):.0f} runs "
                 "per engine; zero-shot schedules measure nothing.")
    return Table(["model", "tasks predicted", "untuned ms", "zero-shot ms", "onnxruntime ms",
                  "zero-shot / untuned"], rows, notes, [("", data)])


def tuning_curve_table(data: dict, where: str) -> Table:
    """`python -m relayish_tools.bench.tuning_curve MODEL --json FILE`: one row per timed point."""
    s = need(data, "summary", where)
    untuned = number(s, "untuned_ms", where)

    def gain(x):
        return "-" if x is None else f"{100 * x:.0f}%"

    naive = data.get("start") == "naive"
    rows = [["naive loop nests (untuned)" if naive else "untuned", "-", "-", ms(untuned), "0%"],
            ["zero-shot", "0 (no measurement)", "-", ms(number(s, "zero_shot_ms", where)),
             f"**{gain(s.get('zero_shot_gain'))}**"]]
    for i, p in enumerate(need(data, "points", where)):
        w = f"{where} points[{i}]"
        rows.append([f"{need(p, 'start', w)} cost model", f"{number(p, 'seconds', w):.0f}",
                     f"{number(p, 'records', w):.0f}", ms(number(p, "median_ms", w)), gain(p.get("gain"))])
    if s.get("hand_written_ms"):
        rows.append(["hand-written schedules (untuned)", "-", "-", ms(s["hand_written_ms"]), "-"])
    rows.append(["onnxruntime", "-", "-", ms(number(s, "onnxruntime_ms", where)), "-"])
    trained = data.get("cost_model_trained_on") or {}
    reach = s.get("pretrained_reaches_90pct_at_s")
    cold_end = number(s, "cold_end_ms", where)
    budget = number(data, "budget_s", where)
    if untuned - cold_end >= s.get("min_gain", 0.0) * untuned and cold_end < untuned:
        gains = (f"Gain: the share of the cold run's gain at the end of its {budget:.0f} s budget (untuned "
                 f"{ms(untuned)} ms -> {ms(cold_end)} ms). The pretrained run reaches 90% of that gain "
                 + (f"at {reach:.0f} s. " if reach is not None else "at none of the checkpoints. "))
    else:
        floor = s.get("min_gain", 0.0)
        gains = (f"Gain: none to share, the cold run ended its {budget:.0f} s budget no measurably faster than "
                 f"untuned ({ms(untuned)} ms -> {ms(cold_end)} ms"
                 + (f"; less than {100 * floor:.0f}% is noise). " if floor else "). "))
    notes = [gains + f"Zero-shot: {need(s, 'zero_shot_tasks', where)} tasks given a predicted schedule, in "
             f"{s.get('predict_s')} s."
             + f" The shipped cost model was trained on {', '.join(trained.get('models', [])) or '?'}: "
             f"{need(data, 'model', where)} is not among them. "
             f"A point at t s: the model compiled with the records its run had measured t s after it started; "
             f"the last point of a run is every record, its final re-measurement included. "
             f"{number(data, 'threads', where):.0f} threads, every engine timed in one process, median of "
             f"{number(data, 'repeat', where):.0f} runs."]
    if data.get("note"):
        notes.append(data["note"])
    return Table(["schedules", "tuning s", "records", "median ms", "gain"], rows, notes, [("", data)])


def build_rate_table(data: dict, where: str) -> Table:
    """`python -m relayish_tools.bench.build_rate ... --json FILE --label before|after`: one row per version."""
    rows, provenance = [], []
    for label in ("before", "after"):
        if label not in data:
            continue
        r, w = data[label], f"{where} {label}"
        measured = r.get("build_measure")
        rows.append([f"{label} ({r.get('version', '?')})", f"{number(r, 'build.programs', w):.0f}",
                     f"{number(r, 'build.programs_per_minute', w):.0f}",
                     f"{number(measured, 'programs_per_minute', w):.0f}" if measured else "-",
                     f"{number(r, 'build.programs_per_worker_minute', w):.0f}"
                     if r["build"].get("programs_per_worker_minute") else "-",
                     ", ".join(f"{k} {v}" for k, v in sorted(r["build"].get("errors", {}).items())) or "none"])
        provenance.append((label, r))
    notes = [data["note"]] if data.get("note") else []
    if data.get("speedup"):
        notes.append("After / before: " + ", ".join(f"{k} x{v}" for k, v in data["speedup"].items()) + ".")
    costs = data.get("costs_after_over_before")
    if costs:
        notes.append(f"Measured kernel costs of the same {costs['candidates']} candidates, after / before: median "
                     f"{costs['median_ratio']}, 10th-90th percentile {costs['p10_ratio']}-{costs['p90_ratio']}.")
    return Table(["version", "programs", "built / min", "built + measured / min", "per worker-minute", "errors"],
                 rows, notes, provenance)
