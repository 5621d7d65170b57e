"""Prometheus metrics for the whole server, from whichever worker is scraped.

Each process counts into a :class:`Metrics` of its own and publishes a JSON
snapshot into its slot of the status board (a seqlock keeps readers from
seeing half a write).  ``GET /metrics`` merges every slot's snapshot, so any
worker answers for the server.  The text format is written by hand: the core
depends on no client library.
"""

from __future__ import annotations

import json
import struct
import threading
from collections import Counter
from typing import Any, Dict, Iterable, List, Optional, Tuple

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_HEAD = struct.Struct("<II")  # sequence number (odd while writing), payload length


class Histogram:
    __slots__ = ("counts", "sum")

    def __init__(self, counts: Optional[List[int]] = None, total: float = 0.0):
        self.counts = counts or [0] * (len(LATENCY_BUCKETS) + 1)  # the last one is +Inf
        self.sum = total

    def observe(self, value: float) -> None:
        for i, bound in enumerate(LATENCY_BUCKETS):
            if value <= bound:
                self.counts[i] += 1
                break
        else:
            self.counts[-1] += 1
        self.sum += value

    def merge(self, other: "Histogram") -> None:
        self.counts = [a + b for a, b in zip(self.counts, other.counts)]
        self.sum += other.sum

    def dump(self) -> List[Any]:
        return [self.counts, self.sum]


class Metrics:
    """One process's counters.  Handler threads update it concurrently."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: Counter = Counter()  # (endpoint, status) -> n
        self.latency: Dict[str, Histogram] = {}
        self.ttft = Histogram()
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.gauges: Dict[str, float] = {}

    def observe_request(self, endpoint: str, status: int, seconds: float) -> None:
        with self._lock:
            self.requests[(endpoint, status)] += 1
            hist = self.latency.get(endpoint)
            if hist is None:
                hist = self.latency[endpoint] = Histogram()
            hist.observe(seconds)

    def observe_tokens(self, prompt: int, generated: int, ttft: Optional[float]) -> None:
        with self._lock:
            self.prompt_tokens += prompt
            self.generation_tokens += generated
            if ttft is not None:
                self.ttft.observe(ttft)

    def snapshot(self) -> Dict[str, Any]:
        with self._lock:
            return {
                "requests": [[e, s, n] for (e, s), n in self.requests.items()],
                "latency": {e: h.dump() for e, h in self.latency.items()},
                "ttft": self.ttft.dump(),
                "prompt_tokens": self.prompt_tokens,
                "generation_tokens": self.generation_tokens,
                "gauges": dict(self.gauges),
            }


def publish(area: memoryview, snapshot: Dict[str, Any]) -> bool:
    """Write a snapshot into a slot's free area; False if it does not fit."""
    data = json.dumps(snapshot, separators=(",", ":")).encode()
    if _HEAD.size + len(data) > len(area):
        return False
    head = area[: _HEAD.size].cast("I")  # whole-word stores: a reader never sees half a number
    seq = head[0]
    head[0] = seq + 1  # odd: a write is under way
    area[_HEAD.size : _HEAD.size + len(data)] = data
    head[1] = len(data)
    head[0] = (seq + 2) & 0xFFFFFFFF
    head.release()
    return True


def read(area: memoryview, tries: int = 100) -> Optional[Dict[str, Any]]:
    head = area[: _HEAD.size].cast("I")
    try:
        for _ in range(tries):
            seq = head[0]
            if seq & 1:
                continue
            n = head[1]
            data = bytes(area[_HEAD.size : _HEAD.size + n])
            if head[0] == seq:
                return json.loads(data) if n else None
        return None
    finally:
        head.release()


def merge(snapshots: Iterable[Optional[Dict[str, Any]]]) -> Dict[str, Any]:
    requests: Counter = Counter()
    latency: Dict[str, Histogram] = {}
    ttft = Histogram()
    prompt = generated = 0
    gauges: Dict[str, float] = {}
    for snap in snapshots:
        if not snap:
            continue
        for e, s, n in snap.get("requests", ()):
            requests[(e, s)] += n
        for e, (counts, total) in snap.get("latency", {}).items():
            latency.setdefault(e, Histogram()).merge(Histogram(counts, total))
        ttft.merge(Histogram(*snap["ttft"]) if "ttft" in snap else Histogram())
        prompt += snap.get("prompt_tokens", 0)
        generated += snap.get("generation_tokens", 0)
        for k, v in snap.get("gauges", {}).items():
            gauges[k] = gauges.get(k, 0) + v
    return {"requests": requests, "latency": latency, "ttft": ttft, "prompt_tokens": prompt,
            "generation_tokens": generated, "gauges": gauges}


def _labels(**labels: Any) -> str:
    if not labels:
        return ""
    inner = ",".join(f'{k}="{_escape(str(v))}"' for k, v in labels.items())
    return "{" + inner + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _histogram(lines: List[str], name: str, hist: Histogram, **labels: Any) -> None:
    running = 0
    for bound, count in zip(LATENCY_BUCKETS + (float("inf"),), hist.counts):
        running += count
        le = "+Inf" if bound == float("inf") else repr(bound)
        lines.append(f"{name}_bucket{_labels(**labels, le=le)} {running}")
    lines.append(f"{name}_sum{_labels(**labels)} {hist.sum!r}")
    lines.append(f"{name}_count{_labels(**labels)} {running}")


def render(m: Dict[str, Any], extra_gauges: List[Tuple[str, str, float]]) -> str:
    """The Prometheus text format (0.0.4) for merged metrics."""
    lines: List[str] = []

    def family(name: str, kind: str, help_text: str) -> None:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")

    family("mtok_requests_total", "counter", "HTTP requests answered, by endpoint and status code.")
    for (endpoint, status), n in sorted(m["requests"].items()):
        lines.append(f"mtok_requests_total{_labels(endpoint=endpoint, status=status)} {n}")
    family("mtok_prompt_tokens_total", "counter", "Prompt tokens of finished generation requests.")
    lines.append(f"mtok_prompt_tokens_total {m['prompt_tokens']}")
    family("mtok_generation_tokens_total", "counter", "Tokens generated for finished requests.")
    lines.append(f"mtok_generation_tokens_total {m['generation_tokens']}")
    family("mtok_request_latency_seconds", "histogram", "Time from a request's arrival to its last byte.")
    for endpoint, hist in sorted(m["latency"].items()):
        _histogram(lines, "mtok_request_latency_seconds", hist, endpoint=endpoint)
    family("mtok_time_to_first_token_seconds", "histogram", "Time from a generation request's arrival to its "
           "first token.")
    _histogram(lines, "mtok_time_to_first_token_seconds", m["ttft"])
    gauges = dict(m["gauges"])
    for name, help_text, value in extra_gauges:
        gauges[name] = value
    for name, help_text in (("num_requests_running", "Requests the scheduler is decoding."),
                            ("num_requests_waiting", "Requests queued in the scheduler.")):
        family(f"mtok_{name}", "gauge", help_text)
        lines.append(f"mtok_{name} {gauges.pop(name, 0)}")
    for name, help_text, _ in extra_gauges:
        kind = "counter" if name.endswith("_total") else "gauge"
        family(f"mtok_{name}", kind, help_text)
        lines.append(f"mtok_{name} {gauges[name]}")
    return "\n".join(lines) + "\n"
