"""Turning measurements into figures, tables and JSON files."""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

PERCENTILES = (50, 90, 99)
# before this command added its own load: was the machine quiet?
LOAD_AT_START = os.getloadavg() if hasattr(os, "getloadavg") else None


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    if not sorted_values:
        return float("nan")
    k = (len(sorted_values) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (k - lo)


def distribution_ms(values: Sequence[float]) -> Optional[Dict[str, float]]:
    """mean and p50/p90/p99 of durations in seconds, in milliseconds; None without data."""
    if not values:
        return None
    s = sorted(values)
    out = {"mean": round(1000 * sum(s) / len(s), 3)}
    for p in PERCENTILES:
        out[f"p{p}"] = round(1000 * percentile(s, p), 3)
    return out


def summarize(records: Any, window: float, cpu_by_role: Optional[Dict[str, float]], client: Any) -> Dict[str, Any]:
    """The figures of one load run; ``cpu_by_role`` is the server's CPU seconds in the
    window by process (see :meth:`.procstat.ProcessTree.cpu_by_role`), None if unknown."""
    n = len(records.end)
    server_cpu = None if cpu_by_role is None else sum(cpu_by_role.values())
    window = max(window, 1e-9)
    e2e = [b - a for a, b in zip(records.start, records.end)]
    ttft = [t for t in records.ttft if t >= 0]
    n_in, n_out = sum(records.input_tokens), sum(records.output_tokens)
    return {
        "requests": n,
        "errors": records.errors,
        "error_samples": records.error_samples,
        "window_s": round(window, 3),
        "requests_per_s": round(n / window, 2),
        "input_tokens_per_s": round(n_in / window, 1),
        "output_tokens_per_s": round(n_out / window, 1),
        "mean_input_tokens": round(n_in / n, 1) if n else 0,
        "mean_output_tokens": round(n_out / n, 1) if n else 0,
        "ttft_ms": distribution_ms(ttft),
        "itl_ms": distribution_ms(records.itl),  # gaps between streamed events
        "tpot_ms": distribution_ms(records.tpot),  # per output token, first event to last
        "e2e_ms": distribution_ms(e2e),
        "server_cpu_s": None if server_cpu is None else round(server_cpu, 3),
        "server_cpu_ms_per_request": None if server_cpu is None or not n else round(1000 * server_cpu / n, 4),
        "server_cores_busy": None if server_cpu is None else round(server_cpu / window, 2),
        "server_cpu_ms_per_request_by_process": None if cpu_by_role is None or not n else
        {role: round(1000 * s / n, 4) for role, s in sorted(cpu_by_role.items(), key=_role_order)},
        "client_cpu_ms_per_request": client.ms_per_request,
        "client_cores_busy": round(client.cores, 2),  # summed over the client processes
    }


def _role_order(item: Any) -> Any:
    """main first, then the core processes, then the workers in order."""
    role = item[0]
    head, _, num = role.rpartition("-")
    return (role != "main", role.startswith("worker"), head if num.isdigit() else role,
            int(num) if num.isdigit() else -1)


def cpu_breakdown(result: Dict[str, Any]) -> str:
    """``main 0.03 + scheduler 0.09 + ...``: CPU ms per request of each server process."""
    by = result.get("server_cpu_ms_per_request_by_process") or {}
    return " + ".join(f"{role} {ms:.3f}" for role, ms in by.items() if ms >= 0.0005 or role == "main")


def machine() -> Dict[str, Any]:
    """Where a run happened: enough to judge whether two runs can be compared."""
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "nproc": os.cpu_count(),
        "cpu_model": model or platform.processor(),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "load_average_at_start": [round(x, 2) for x in LOAD_AT_START] if LOAD_AT_START else None,
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }


def write_json(path: Optional[str], command: str, params: Dict[str, Any], results: Any) -> None:
    if not path:
        return
    doc = {"command": command, "argv": sys.argv, "machine": machine(), "params": params, "results": results}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2, default=str)
        f.write("\n")


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.3f}" if abs(value) < 10 else f"{value:,.1f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def table(rows: List[Dict[str, Any]], columns: List[Tuple[str, str]]) -> str:
    """A plain-text table: ``columns`` are (heading, key); a key may be 'a.b' for nested dicts."""
    cells = [[h for h, _ in columns]] + [[_fmt(lookup(r, k)) for _, k in columns] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    lines = ["  ".join(c.rjust(w) if j else c.ljust(w) for j, (c, w) in enumerate(zip(row, widths))) for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def lookup(row: Dict[str, Any], key: str) -> Any:
    value: Any = row
    for part in key.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


LOAD_COLUMNS = [
    ("label", "label"), ("req/s", "requests_per_s"), ("in tok/s", "input_tokens_per_s"),
    ("out tok/s", "output_tokens_per_s"), ("TTFT p50 ms", "ttft_ms.p50"), ("ITL p50 ms", "itl_ms.p50"),
    ("TPOT p50 ms", "tpot_ms.p50"),    ("e2e p50 ms", "e2e_ms.p50"), ("e2e p99 ms", "e2e_ms.p99"), ("CPU ms/req", "server_cpu_ms_per_request"),
    ("errors", "errors"),
]


def describe_load(result: Dict[str, Any]) -> str:
    """A few readable lines for one load run."""
    lines = [
        f"requests: {result['requests']:,} in {result['window_s']:.1f} s  ({result['requests_per_s']:,.1f} req/s, "
        f"{result['input_tokens_per_s']:,.0f} input tok/s, {result['output_tokens_per_s']:,.0f} output tok/s)",
        f"errors: {result['errors']}" + (f"  e.g. {result['error_samples'][0]}" if result["error_samples"] else ""),
    ]
    for name in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms"):
        d = result.get(name)
        if d:
            lines.append(f"{name[:-3]:>5} ms: mean {d['mean']:.3f}  p50 {d['p50']:.3f}  p90 {d['p90']:.3f}  "
                         f"p99 {d['p99']:.3f}")
    if result.get("server_cpu_s") is not None:
        lines.append(f"server CPU: {result['server_cpu_s']:.2f} s = {result['server_cpu_ms_per_request']} ms/request "
                     f"({result['server_cores_busy']} cores busy)")
        if result.get("server_cpu_ms_per_request_by_process"):
            lines.append(f"  by process, ms/request: {cpu_breakdown(result)}")
    if result.get("client_cpu_ms_per_request") is not None:
        lines.append(f"client CPU: {result['client_cpu_ms_per_request']} ms/request "
                     f"({result['client_cores_busy']} cores busy)")
    return "\n".join(lines)
