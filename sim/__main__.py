"""``python -m sim calibrate [--fit | --held-out]`` | ``python -m sim report [--out DIR]``."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from sim.calibrate import compare, describe, fit, held_out, max_speedup_error
from sim.params import SimParams
from sim.report import calibration_md, write_report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sim", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    cal = sub.add_parser("calibrate", help="published vs simulated GSM8K table")
    cal.add_argument("--fit", action="store_true",
                     help="re-fit the step-time coefficients first and print them")
    cal.add_argument("--held-out", action="store_true",
                     help="leave each published column out of the fit in turn and "
                          "show how well the others predict it")
    rep = sub.add_parser("report", help="every scenario; markdown + PNGs; summary line")
    rep.add_argument("--out", type=Path, default=Path("bench/out/sim"))
    rep.add_argument("--seed", type=int, default=100)
    rep.add_argument("--scale", type=float, default=2.0,
                     help="requests per point, relative to the default")
    args = parser.parse_args(argv)

    params = SimParams()
    if args.command == "calibrate":
        if args.held_out:
            rows = held_out(params)
            print("\n".join(calibration_md(rows)))
            print(f"\nheld_out_max_err={max_speedup_error(rows):.3f}")
            return 0
        if args.fit:
            params = fit(params)
            print("fitted (paste into sim/params.py):\n" + describe(params) + "\n")
        rows = compare(params, scale=2.0)
        print("\n".join(calibration_md(rows)))
        err = max_speedup_error(rows)
        print(f"\ncalibration_max_err={err:.3f}")
        return 0 if err <= 0.10 else 1
    began = time.monotonic()
    summary = write_report(args.out, params, args.seed, args.scale)
    print(f"report: {args.out / 'report.md'} ({time.monotonic() - began:.0f} s)")
    print(summary.line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
