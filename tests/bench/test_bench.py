"""Every ``python -m mtok.bench`` sub-command, briefly, so the tool cannot rot.

Each test runs a sub-command as a user would, for a second or two, and checks
the JSON it writes: the expected fields, requests answered, no errors.  No test
asserts a timing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any, Dict, List

import pytest

from support import ROOT, Server, skip_real, wait_for

from mtok.procutil import pid_alive
from mtok.bench.http_client import Connection, Target
from mtok.bench.svg import Chart, nice_ceiling

SHORT = ["--duration", "1", "--warmup", "0.3", "--quiet", "--clients", "1"]
LOAD_FIELDS = {"requests", "errors", "requests_per_s", "input_tokens_per_s", "output_tokens_per_s", "ttft_ms",
               "itl_ms", "e2e_ms", "server_cpu_s", "server_cpu_ms_per_request", "client_cpu_ms_per_request"}


def bench(tmp_path, *args: str, timeout: float = 60) -> Dict[str, Any]:
    out = tmp_path / "out.json"
    proc = subprocess.run([sys.executable, "-m", "mtok.bench", *args, "--json", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(out.read_text())
    assert doc["machine"]["nproc"] >= 1 and doc["machine"]["python"]
    return doc


def check_load(result: Dict[str, Any], streamed: bool = False) -> None:
    assert LOAD_FIELDS <= set(result), LOAD_FIELDS - set(result)
    assert result["errors"] == 0, result["error_samples"]
    assert result["requests"] > 0 and result["requests_per_s"] > 0
    assert set(result["e2e_ms"]) == {"mean", "p50", "p90", "p99"}
    assert result["server_cpu_s"] is not None and result["server_cpu_s"] >= 0
    if streamed:
        assert result["ttft_ms"] is not None and result["output_tokens_per_s"] > 0


@pytest.fixture(scope="module")
def server():
    srv = Server("--tokenizer-worker-num", "2")
    yield srv
    srv.stop()


@pytest.mark.fast
def test_load_against_a_running_server_streams_and_finds_its_pid(tmp_path, server):
    doc = bench(tmp_path, "load", "--url", f"http://{server.host}:{server.port}", "--endpoint", "completions",
                "--stream", "--input-len", "16", "--output-len", "8", "--concurrency", "4", *SHORT)
    result = doc["results"]
    check_load(result, streamed=True)
    assert result["server"]["root_pid"] == server.pid  # the supervisor, found through a worker
    assert result["mean_input_tokens"] == 16 and result["mean_output_tokens"] == 8


@pytest.mark.fast
def test_load_of_natural_text_splits_the_cpu_by_process(tmp_path, server):
    """--text natural: prose, Korean, code and a mixture, each cut to the token count; the
    server's CPU per request comes split over its processes, and the parts add up."""
    doc = bench(tmp_path, "load", "--url", f"http://{server.host}:{server.port}", "--text", "natural",
                "--endpoint", "generate", "--input-len", "64", "--output-len", "1", "--concurrency", "4", *SHORT)
    result = doc["results"]
    check_load(result)
    assert doc["params"]["workload"]["text"] == "natural"
    assert 60 <= result["mean_input_tokens"] <= 64  # a cut by characters may fall a token or so short
    by = result["server_cpu_ms_per_request_by_process"]
    assert {"main", "scheduler", "worker-0", "worker-1"} <= set(by), by  # the detokenizer is inline
    assert "detokenizer" not in by, by
    assert sum(by.values()) == pytest.approx(result["server_cpu_ms_per_request"], abs=0.01)


@pytest.mark.fast
@pytest.mark.parametrize("backend", ["auto", "python"])
def test_natural_prompts_hold_their_scripts_and_token_counts(backend):
    from mtok.bench.natural_text import NaturalPromptMaker
    from mtok.tokenizer.load import load_tokenizer

    tok = load_tokenizer(None, backend)
    maker = NaturalPromptMaker(tok, "natural", seed=1)
    prompts = [maker.make(200) for _ in range(8)]
    for p in prompts:
        assert 195 <= len(tok.encode(p)) <= 200, p[:80]
    english, korean, code, mixed = prompts[:4]
    hangul = lambda s: sum("\uac00" <= c <= "\ud7a3" for c in s)  # noqa: E731
    assert hangul(korean) > len(korean) // 2 and hangul(english) == 0 and hangul(code) == 0
    assert hangul(mixed) > 0 and "```" in mixed
    assert code.count("\n") > 5 and ("def " in code or "import " in code or "return" in code)
    assert prompts[4:] != prompts[:4]  # the next round of kinds takes other slices
    assert NaturalPromptMaker(tok, "korean", seed=1).make(200) != NaturalPromptMaker(tok, "korean", seed=2).make(200)


@pytest.mark.fast
def test_load_by_count_and_rate_mixed(tmp_path, server):
    doc = bench(tmp_path, "load", "--url", f"http://{server.host}:{server.port}", "--endpoint", "mixed",
                "--requests", "60", "--rate", "200", "--input-len", "8", "--output-len", "4", *SHORT)
    result = doc["results"]
    check_load(result)
    assert result["requests"] == 60


def test_load_starts_its_own_server(tmp_path):
    doc = bench(tmp_path, "load", "--endpoint", "tokenize", "--input-len", "32", "--concurrency", "2", *SHORT)
    check_load(doc["results"])
    assert doc["results"]["server"]["kind"] == "mtok"


def test_load_streamed_chat_with_tool_calls_through_the_parsers(tmp_path):
    doc = bench(tmp_path, "load", "--endpoint", "chat-tools", "--stream", "--input-len", "16", "--output-len", "64",
                "--concurrency", "2", "--server-arg=--chat-template=examples/chat_template_echo_last.jinja",
                "--server-arg=--tool-call-parser=qwen25", "--server-arg=--reasoning-parser=deepseek-r1", *SHORT)
    check_load(doc["results"], streamed=True)
    assert doc["results"]["mean_output_tokens"] == 64


def test_sweep_draws_the_curve(tmp_path):
    svg = tmp_path / "curve.svg"
    doc = bench(tmp_path, "sweep", "--workers-list", "1,2", "--input-len", "16", "--output-len", "1",
                "--concurrency", "4", "--svg", str(svg), *SHORT)
    rows = doc["results"]
    assert [r["workers"] for r in rows] == [1, 2]
    for r in rows:
        check_load(r)
    assert rows[1]["speedup"] is not None
    text = svg.read_text()
    assert text.startswith("<svg") and text.count("<polyline") == 2  # the curve and the linear line


@pytest.mark.fast
def test_transport(tmp_path):
    doc = bench(tmp_path, "transport", "--prompt-tokens", "16", "--round-trips", "100", "--messages", "500")
    rows = doc["results"]
    assert rows[0]["transport"] == "mtok.wire.ipc"
    for r in rows:
        assert r["received"] == 500 and r["messages_per_s"] > 0 and r["hop_us"]["p50"] > 0


def test_soak_samples_the_server(tmp_path):
    doc = bench(tmp_path, "soak", "--interval", "0.5", "--input-len", "8", "--output-len", "4", "--concurrency", "4",
                *SHORT)
    result = doc["results"]
    check_load(result["load"])
    assert len(result["samples"]) >= 2
    sample = result["samples"][-1]
    assert sample["rss_mb"] > 0 and sample["open_fds"] > 0 and sample["processes"] >= 3


def test_detok(tmp_path):
    doc = bench(tmp_path, "detok", "--tokens", "256", "--streams", "1,4", "--repeat", "1", "--backend", "python")
    rows = doc["results"]
    assert [r["streams"] for r in rows] == [1, 4]
    assert all(r["same_text"] and r["stream_ms"] > 0 and r["one_shot_ms"] > 0 for r in rows)


@pytest.mark.fast
def test_chat(tmp_path):
    doc = bench(tmp_path, "chat", "--seconds", "0.02", "--repeat", "1")
    rows = doc["results"]
    assert {r["conversation"] for r in rows} == {"3-turn", "tools"}
    assert all(r["us_per_render"] > 0 and r["same_output"] for r in rows)
    assert {r["backend"] for r in rows} >= {"python"}


def peer_python() -> str:
    """An interpreter with the peer's packages: this one, or $MTOK_PEER_PYTHON."""
    python = os.environ.get("MTOK_PEER_PYTHON", sys.executable)
    probe = "import fastapi, uvicorn, tokenizers, zmq, jinja2"
    if subprocess.run([python, "-c", probe], capture_output=True).returncode != 0:
        skip_real(f"the FastAPI peer's packages (benchmarks/peers/requirements.txt) are not installed for {python}; "
                  "set MTOK_PEER_PYTHON to an interpreter that has them")
    return python


def test_compare_with_the_fastapi_peer(tmp_path):
    python = peer_python()
    doc = bench(tmp_path, "compare", "--python", python, "--rounds", "1", "--input-len", "16", "--output-len", "4",
                "--concurrency", "4", *SHORT)
    result = doc["results"]
    for side in ("mtok", "fastapi"):
        check_load(result[side])
    assert result["ratio"]["requests_per_s"] > 0
    assert {"main", "scheduler"} <= set(result["mtok"]["server_cpu_ms_per_request_by_process"])
    assert {"main", "engine"} <= set(result["fastapi"]["server_cpu_ms_per_request_by_process"])


QWEN3_TEMPLATE = os.path.join(ROOT, "tests", "chat_templates", "qwen3.json")
CHAT_3TURN = ["--endpoint", "chat-3turn", "--stream", "--chat-template", QWEN3_TEMPLATE, "--check-only"]


def test_the_chat_workload_gets_the_same_reply_from_both_servers(tmp_path):
    """chat-3turn through Qwen3's template: mtok and the peer, streamed and not, parse the echoed
    conversation into the same reasoning, answer and tool call, the ones the last message holds."""
    python = peer_python()
    doc = bench(tmp_path, "compare", "--python", python, *CHAT_3TURN, "--tool-call-parser", "qwen25",
                "--reasoning-parser", "qwen3")
    check = doc["results"]["check"]
    assert check["problems"] == []
    replies = [r for by_mode in check["replies"].values() for r in by_mode.values()]
    assert len(replies) == 4 and all(r == replies[0] for r in replies)
    reply = replies[0]
    assert reply["calls"][0]["name"] in ("get_weather", "get_time") and len(reply["calls"]) == 1
    assert json.loads(reply["calls"][0]["arguments"])["city"] in reply["content"]
    assert reply["content"].startswith("Let me look up") and "<think>" in reply["reasoning"]
    assert reply["completion_tokens"] == check["reply_tokens"] < check["prompt_tokens"]


def test_the_chat_workload_check_fails_without_the_parsers(tmp_path):
    """Without --reasoning-parser the reply is not the expected one: compare says so and measures nothing."""
    python = peer_python()
    out = tmp_path / "out.json"
    proc = subprocess.run([sys.executable, "-m", "mtok.bench", "compare", "--python", python, *CHAT_3TURN,
                           "--tool-call-parser", "qwen25", "--json", str(out)], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    problems = json.loads(out.read_text())["results"]["check"]["problems"]
    assert any(p.startswith("mtok (stream): content") for p in problems)
    assert any(p.startswith("fastapi (json): content") for p in problems)


def test_compare_says_why_it_skips_a_missing_peer(tmp_path):
    """An interpreter without the peer's packages: compare says so and exits 0."""
    lacking = [sys.executable, "-S"]  # -S: no site-packages, so no fastapi
    probe = subprocess.run([*lacking, "-c", "import fastapi"], capture_output=True)
    if probe.returncode == 0:
        pytest.skip("fastapi is importable even without site-packages")
    wrapper = tmp_path / "python-without-site"
    wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} -S \"$@\"\n")
    wrapper.chmod(0o755)
    doc = bench(tmp_path, "compare", "--python", str(wrapper), "--rounds", "1", *SHORT)
    assert "fastapi" in doc["results"]["skipped"]


def test_vllm_frontend_says_why_it_skips_without_a_vllm(tmp_path):
    """No vLLM venv: the bench boots nothing, says why and exits 0 (its real runs are in docs/benchmarks.md)."""
    doc = bench(tmp_path, "vllm-frontend", "--venv", str(tmp_path / "no-venv"), "--quiet")
    assert "no-venv" in doc["results"]["skipped"] and doc["params"]["workers"] == [1, 2]


@pytest.mark.fast
def test_vllm_processes_are_named_by_their_title():
    """vLLM titles its engine "VLLM::EngineCore": the CPU split names it so."""
    from mtok.bench.procstat import ProcessTree

    child = subprocess.Popen(["bash", "-c", 'exec -a "VLLM::EngineCore" sleep 60'])
    try:
        wait_for(lambda: open(f"/proc/{child.pid}/cmdline", "rb").read().startswith(b"VLLM::"), timeout=10)
        roles = ProcessTree(os.getpid()).cpu_by_role()
        assert "EngineCore" in roles and "main" in roles
    finally:
        child.kill()
        child.wait()


@pytest.mark.fast
def test_tokenizer_command_still_dispatches():
    proc = subprocess.run([sys.executable, "-m", "mtok.bench"], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2
    names: List[str] = [line.split()[0] for line in proc.stdout.splitlines()[3:] if line.strip()]
    assert {"tokenizer", "load", "sweep", "transport", "soak", "compare", "detok", "chat", "parsers", "offline"} <= set(names)


# -- pieces, without a server ---------------------------------------------------------

@pytest.mark.fast
def test_the_client_reads_chunked_events_split_anywhere():
    """Feed a chunked SSE response to the parser in every possible two-piece split."""
    body = b'data: {"a": 1}\n\n', b'data: {"usage": {"prompt_tokens": 3, "completion_tokens": 2}}\n\n', b"data: [DONE]\n\n"
    raw = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    raw += b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in body) + b"0\r\n\r\n"
    for cut in range(1, len(raw)):
        conn = Connection.__new__(Connection)  # the parser alone, without a socket
        conn.buf, conn.busy = bytearray(raw[:cut]), True
        conn._reset()
        assert conn._parse(1.0) is None
        conn.buf += raw[cut:]
        resp = conn._parse(2.0)
        assert resp is not None and resp.status == 200, cut
        assert len(resp.events) == 2 and b'"completion_tokens": 2' in resp.body


@pytest.mark.fast
def test_chart_and_scale():
    assert [nice_ceiling(v) for v in (0.7, 3, 42, 1000, 1001)] == [1, 5, 50, 1000, 2000]
    chart = Chart("t <&>", "x", "y")
    chart.add("a", [(1, 10.0), (2, 19.0)])
    svg = chart.render()
    assert "t &lt;&amp;&gt;" in svg and svg.count("<circle") == 2


def test_target_parsing():
    assert Target.from_url("http://127.0.0.1:8000").port == 8000
    assert Target.from_url("[::1]:9").host == "::1"
    with pytest.raises(ValueError):
        Target.from_url("https://example.invalid")


def test_the_peer_answers_like_mtok():
    """Same endpoints, same shapes, same echo: the comparison compares like with like."""
    from mtok.bench.procstat import ProcessTree
    from mtok.bench.servers import ServerConfig, ServerProcess

    python = peer_python()
    bodies = [
        ("/generate", {"text": "The quick brown fox", "sampling_params": {"max_new_tokens": 6, "ignore_eos": True}}),
        ("/v1/completions", {"prompt": "jumps over the lazy dog", "max_tokens": 5, "ignore_eos": True}),
        ("/tokenize", {"prompt": "héllo wörld 👋"}),
        ("/generate", {"text": "streamed text", "stream": True, "sampling_params": {"max_new_tokens": 7}}),
    ]
    answers = {}
    for kind in ("mtok", "fastapi"):
        with ServerProcess(ServerConfig(kind=kind, python=python)) as srv:
            client = Server.__new__(Server)  # support's HTTP helpers, pointed at this server
            client.host, client.port = srv.target.host, srv.target.port
            got = []
            for path, body in bodies:
                if body.get("stream"):
                    events = client.stream(path, body)
                    # mtok folds updates that come faster than they are written into one
                    # event, so only the final state is compared
                    assert events[-1] == "[DONE]"
                    got.append((events[-2]["text"], events[-2]["output_ids"]))
                else:
                    status, reply = client.post(path, body)
                    assert status == 200, reply
                    got.append(reply)
            answers[kind] = got
            tree = ProcessTree(srv.pid).pids()
        wait_for(lambda: not any(pid_alive(p) for p in tree), what=f"every process of {kind} to exit")
    mine, peer = answers["mtok"], answers["fastapi"]
    for k in ("text", "output_ids"):
        assert mine[0][k] == peer[0][k]
    assert mine[0]["meta_info"]["completion_tokens"] == peer[0]["meta_info"]["completion_tokens"] == 6
    assert mine[1]["choices"][0]["text"] == peer[1]["choices"][0]["text"]
    assert mine[1]["usage"] == peer[1]["usage"]
    assert mine[2]["tokens"] == peer[2]["tokens"] and mine[2]["count"] == peer[2]["count"]
    assert mine[3] == peer[3]


def test_parsers(tmp_path):
    doc = bench(tmp_path, "parsers", "--sizes", "1000,4000", "--repeat", "1", "--tool-parsers", "hermes,kimi_k2",
                "--reasoning-parsers", "qwen3")
    rows = doc["results"]
    assert [(r["parser"], r["chars"]) for r in rows] == [(p, n) for p in ("hermes", "kimi_k2", "qwen3")
                                                         for n in (1000, 4000)]
    assert all(r["same_result"] and r["tokens"] == 250 * r["chars"] // 1000 and r["stream_us_per_token"] > 0
               and r["scan_ratio"] <= 2 for r in rows)


@pytest.mark.fast
def test_offline_beside_http(tmp_path):
    doc = bench(tmp_path, "offline", "--batch", "300", "--input-len", "8", "--output-len", "2", "--concurrency", "8",
                "--quiet")
    rows = doc["results"]["rows"]
    assert [r["mode"].split()[0] for r in rows] == ["offline", "HTTP"]
    assert all(r["requests"] == 300 and not r.get("errors") and r["requests_per_s"] > 0 for r in rows)
    assert doc["results"]["offline_over_http"] > 0
