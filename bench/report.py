"""The routing report: the GPU serving simulator and the real CPU sweep, in one file.

Writes ``<out>/REPORT.md`` (tables and PNG plots: the simulator's calibration,
concurrency sweeps and mixed workload, then the real vLLM CPU sweep) and ends
by printing one summary line:

``calibration_max_err=… auto_vs_oracle_min=… mixed_vs_best_static=…
auto_vs_plain_min=… auto_vs_best_single_min=… mixed_vs_best_single=…
cpu_auto_vs_best_min=…``

    .venv/bin/python -m bench.report [--out bench/out] [--no-cpu | --cpu-from JSON]
"""

from __future__ import annotations

import argparse
import re
import time
from pathlib import Path

from bench import cpu_sweep
from sim.params import SimParams
from sim.report import write_report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench/out"))
    parser.add_argument("--no-cpu", action="store_true",
                        help="simulation only (no vLLM engines started)")
    parser.add_argument("--requests-per-client", type=int, default=1)
    parser.add_argument("--cpu-from", type=Path, metavar="JSON",
                        help="the CPU sweep's cells from an earlier run (its "
                             "cpu_sweep.json) instead of running it again")
    args = parser.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)

    began = time.monotonic()
    summary = write_report(out / "sim", SimParams())
    print(f"simulation: {time.monotonic() - began:.0f} s", flush=True)
    sim_md = (out / "sim" / "report.md").read_text()
    # The simulator's plots live beside its own report; point at them from here.
    sim_md = re.sub(r"!\[([^\]]*)\]\(([^)/]+\.png)\)", r"![\1](sim/\2)", sim_md)
    sim_md = sim_md.replace("\n## Summary", "\n## Simulation summary", 1)
    sections = [sim_md.replace("# SpecGate serving simulator: results",
                               "# SpecGate routing report\n\n## Part 1: GPU serving simulator", 1)]
    line = summary.line()

    if not args.no_cpu:
        began = time.monotonic()
        if args.cpu_from is not None:
            cells = cpu_sweep.load(args.cpu_from)
            took = (out / "cpu" / "took_s.txt").read_text().strip() \
                if (out / "cpu" / "took_s.txt").exists() else "?"
        else:
            cells = cpu_sweep.run(out / "cpu", per_client=args.requests_per_client)
            took = f"{time.monotonic() - began:.0f}"
            (out / "cpu" / "took_s.txt").write_text(took + "\n")
        (out / "cpu").mkdir(parents=True, exist_ok=True)   # --cpu-from into a new --out
        pngs = cpu_sweep.plot(cells, out / "cpu")
        ratios = cpu_sweep.auto_vs_best(cells)
        worst = min(ratios.values())
        sections.append("\n".join([
            "## Part 2: real CPU sweep (vLLM CPU engines, embedded model)", "",
            cpu_sweep.__doc__.split("\n\n", 1)[1].split("    .venv", 1)[0].strip(), "",
            f"Measured in one run ({took} s). Completion tokens/s:",
            "", cpu_sweep.markdown(cells), "",
            *[f"![{p.stem}](cpu/{p.name})" for p in pngs], "",
            f"Worst `auto` / best forced mode: **{worst:.3f}** "
            f"(target ≥ 0.90 at every concurrency, per workload)."]))
        line += f" cpu_auto_vs_best_min={worst:.3f}"

    sections.append("## Summary\n\n```\n" + line + "\n```\n")
    (out / "REPORT.md").write_text("\n\n".join(sections))
    print(f"report: {out / 'REPORT.md'}")
    print(line)


if __name__ == "__main__":
    main()
