"""python -m relayish_tools.fuzz --mutants N --seed S --workers 2 [--out report.json] [--out-dir fuzz_out]

Prints the campaign's summary (counts per verdict, coverage gaps by reason, every failure with its reproducer)
and exits 1 if any mutant was a crash, hang, wrong result, unclear error or unjustified acceptance."""
from __future__ import annotations

import argparse
import json
import sys

from .campaign import run_campaign


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m relayish_tools.fuzz", description=__doc__.split("\n\n")[1])
    p.add_argument("--mutants", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--first", type=int, default=0, help="index of the first mutant (to rerun one: --first I "
                                                        "--mutants 1)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per mutant before it counts as a hang")
    p.add_argument("--memory-gb", type=float, default=4.0, help="address-space limit of each worker")
    p.add_argument("--out", help="write the report as JSON here")
    p.add_argument("--out-dir", default="fuzz_out", help="folder for the reproducers (.onnx + .json)")
    args = p.parse_args(argv)
    report = run_campaign(args.mutants, args.seed, args.workers, args.out_dir, args.timeout,
                          int(args.memory_gb * (1 << 30)), args.first)
    print(report.summary())
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report.as_dict(), f, indent=1)
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
