"""Paired against independent: the same two recorded runs compared both ways, interval by interval.

    uv run python -m bench.paired_intervals --store reports RUN BASELINE

Prints, per benchmark and metric that pairing applies to (accuracy, pass@k), the delta with its 95% CI as the
independent comparison makes it (each run's clustered SE, or Newcombe) and as the paired one does (per-prompt
differences over the shared prompts), the two widths and their ratio, and each one's smallest detectable change.
Both come from the runs' metrics.json alone; nothing is re-run.
"""

from __future__ import annotations

import argparse

from core.store import Store
from flows.compare import compare_runs
from tasks.analysis.compare import compare_benchmark, load_run_record
from tasks.reporting.format import fmt_delta


def _ci(low: float | None, high: float | None) -> str:
    return "-" if low is None or high is None else f"{fmt_delta(low, True)} … {fmt_delta(high, True)}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run")
    parser.add_argument("baseline")
    parser.add_argument("--store", default="reports")
    args = parser.parse_args()
    store = Store(args.store)
    compared = compare_runs(store, args.run, args.baseline)
    cur, base = load_run_record(store, compared.current), load_run_record(store, compared.baseline)
    header = ["benchmark", "metric", "delta", "independent 95% CI", "paired 95% CI", "width ratio",
              "detectable indep.", "detectable paired", "paired method"]  # fmt: skip
    rows = []
    for name, paired_rows in compared.comparison.benchmarks.items():
        independent = compare_benchmark(cur.benchmarks[name], base.benchmarks[name], paired=False)
        for key, p in paired_rows.items():
            i = independent.get(key)
            if i is None or not p.method.startswith("paired"):
                continue
            wi = None if i.low is None or i.high is None else i.high - i.low
            wp = None if p.low is None or p.high is None else p.high - p.low
            ratio = f"{wp / wi:.2f}" if wi and wp is not None else "-"
            det_i = "-" if i.detectable is None else f"±{i.detectable * 100:.2f} pp"
            det_p = "-" if p.detectable is None else f"±{p.detectable * 100:.2f} pp"
            rows.append([name, p.label, fmt_delta(p.delta, True), f"{_ci(i.low, i.high)} ({i.method})",
                         _ci(p.low, p.high), ratio, det_i, det_p, p.method])  # fmt: skip
    widths = [max(len(str(r[c])) for r in [header, *rows]) for c in range(len(header))]
    for r in [header, ["-" * w for w in widths], *rows]:
        print("  ".join(str(cell).ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip())
    print(f"\n{args.run} against {args.baseline}; width ratio = paired / independent (below 1: pairing narrowed it)")


if __name__ == "__main__":
    main()
