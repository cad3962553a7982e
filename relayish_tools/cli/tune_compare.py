"""`relayish tune-compare MODEL --strategies autotvm-xgb,ansor,metaschedule --trials N [--out DIR] [--json FILE]`:
the three generations of tuning on the same tasks and budget (tuning/compare.py); writes DIR/compare.png,
compare.csv, compare.txt and one records database per strategy, and with --json the table and curves as JSON
(bench/report.py tune_compare_report; docs/data/tune_compare_<model>.json)."""
from __future__ import annotations

from .common import EXIT_OK, CliError, existing, input_shapes_arg, parse_input_shape, positive_int


def add_tune_compare_parser(sub) -> None:
    p = sub.add_parser("tune-compare", help="tune a model with AutoTVM, Ansor and MetaSchedule; plot and table")
    p.add_argument("model", metavar="MODEL")
    p.add_argument("--strategies", default="autotvm-xgb,ansor,metaschedule",
                   help="comma-separated, among autotvm-random, autotvm-grid, autotvm-ga, autotvm-xgb, ansor, "
                        "metaschedule, metaschedule-replay")
    p.add_argument("--trials", type=positive_int, required=True, help="measured programs per strategy")
    p.add_argument("--out", default="tune_compare", metavar="DIR", help="directory for the plot, table and records")
    p.add_argument("--batch-size", type=positive_int, default=16, help="programs measured per round")
    p.add_argument("--input-shape", dest="input_shapes", action="append", type=parse_input_shape, default=[],
                   metavar="NAME=DIMS")
    p.add_argument("--layout", choices=["NCHWc", "NCHW"], default="NCHWc")
    p.add_argument("--winograd", action="store_true",
                   help="let 3x3 convolutions use Winograd (AutoTVM has no Winograd template: they keep their default)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", metavar="FILE", help="also write the table and the curves, with the machine, date, "
                                                   "versions and command line")
    p.set_defaults(func=cmd_tune_compare)


def cmd_tune_compare(args) -> int:
    from tuning.compare import COMPARE_PARAMS, STRATEGIES, tune_compare
    existing(args.model, "model")
    strategies = [s.strip() for s in args.strategies.split(",") if s.strip()]
    unknown = [s for s in strategies if s not in STRATEGIES]
    if unknown or not strategies:
        raise CliError(f"unknown strategies {unknown}; choose among {','.join(STRATEGIES)}")
    runs = tune_compare(args.model, strategies, args.trials, args.out, input_shapes_arg(args.input_shapes),
                        args.layout, winograd=args.winograd, params={"batch_size": args.batch_size, "seed": args.seed})
    print(f"wrote {args.out}/compare.png, compare.csv, compare.txt")
    if args.json:
        from relayish_tools.bench.report import command_line, tune_compare_report, write_report
        options = {k: v for k, v in vars(args).items() if k not in ("func", "argv", "json")}
        write_report(tune_compare_report(args.model, runs, COMPARE_PARAMS["within"], options,
                                         command_line("relayish", getattr(args, "argv", None))), args.json)
        print(f"wrote {args.json}")
    return EXIT_OK
