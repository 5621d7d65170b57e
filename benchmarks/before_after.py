"""The table of benchmarks/before_after.sh: per row, the median over rounds of
each side's throughput, p50 latency and server CPU per request, and after / before."""

from __future__ import annotations

import collections
import glob
import json
import os
import statistics
import sys


def result(path):
    with open(path) as f:
        data = json.load(f)
    return data.get("results", data)


def main(out):
    runs = collections.defaultdict(lambda: collections.defaultdict(list))
    for path in sorted(glob.glob(os.path.join(out, "*.json"))):
        name, side, _ = os.path.basename(path)[:-5].rsplit("-", 2)
        runs[name][side].append(result(path))
    print("| row | req/s before | req/s after | × | tokens/s before | tokens/s after | p50 ms before | "
          "p50 ms after | CPU ms/req before | CPU ms/req after |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, sides in runs.items():
        def med(side, get):
            values = [get(r) for r in sides.get(side, []) if get(r) is not None]
            return statistics.median(values) if values else float("nan")
        rps = [med(s, lambda r: r.get("requests_per_s")) for s in ("before", "after")]
        tps = [med(s, lambda r: r.get("output_tokens_per_s")) for s in ("before", "after")]
        p50 = [med(s, lambda r: (r.get("e2e_ms") or {}).get("p50")) for s in ("before", "after")]
        cpu = [med(s, lambda r: r.get("server_cpu_ms_per_request")) for s in ("before", "after")]
        print(f"| {name} | {rps[0]:,.0f} | {rps[1]:,.0f} | {rps[1] / rps[0]:.2f} | {tps[0]:,.0f} | {tps[1]:,.0f} | "
              f"{p50[0]:.2f} | {p50[1]:.2f} | {cpu[0]:.3f} | {cpu[1]:.3f} |")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "benchmarks/results/before-after")
