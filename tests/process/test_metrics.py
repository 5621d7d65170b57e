"""GET /metrics: Prometheus text that any worker answers for the whole server."""

from __future__ import annotations

import os
import signal

import pytest

from support import import_real, wait_for

prometheus_parser = import_real("prometheus_client.parser")

pytestmark = pytest.mark.fast


@pytest.fixture(scope="module", params=[1, 2], ids=["N1", "N2"])
def srv(request, server_factory):
    return server_factory("--tokenizer-worker-num", str(request.param))


def scrape(srv):
    status, headers, body = srv.request("GET", "/metrics")
    assert status == 200 and headers["content-type"].startswith("text/plain")
    samples = {}
    for family in prometheus_parser.text_string_to_metric_families(body.decode()):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def value(samples, name, **labels):
    return samples.get((name, tuple(sorted((k, str(v)) for k, v in labels.items()))), 0)


def test_counts_match_the_traffic(srv):
    before = scrape(srv)
    prompt_tokens = generated = 0
    for i in range(7):
        status, body = srv.post("/generate", {"text": f"count me {i}", "sampling_params": {"max_new_tokens": 3}})
        assert status == 200
        prompt_tokens += body["meta_info"]["prompt_tokens"]
        generated += body["meta_info"]["completion_tokens"]
    for _ in range(4):
        assert srv.post("/tokenize", {"prompt": "x"})[0] == 200
    for _ in range(3):
        assert srv.post("/generate", {"text": ""})[0] == 400
    for _ in range(2):
        assert srv.get("/no/such/path")[0] == 404

    def delta(samples, name, **labels):
        return value(samples, name, **labels) - value(before, name, **labels)

    def settled():
        s = scrape(srv)  # may be answered by either worker
        return (delta(s, "mtok_requests_total", endpoint="/generate", status=200) == 7
                and delta(s, "mtok_requests_total", endpoint="/tokenize", status=200) == 4
                and delta(s, "mtok_requests_total", endpoint="/generate", status=400) == 3
                and delta(s, "mtok_requests_total", endpoint="other", status=404) == 2
                and delta(s, "mtok_prompt_tokens_total") == prompt_tokens
                and delta(s, "mtok_generation_tokens_total") == generated
                and delta(s, "mtok_time_to_first_token_seconds_count") == 7
                and delta(s, "mtok_request_latency_seconds_count", endpoint="/generate") == 10) and s

    samples = wait_for(settled, timeout=5, what="the counters to reflect the traffic")
    assert value(samples, "mtok_num_requests_running") == 0 and value(samples, "mtok_num_requests_waiting") == 0
    assert value(samples, "mtok_workers") == srv.info()["tokenizer_worker_num"]
    assert value(samples, "mtok_worker_restarts_total") == 0
    assert value(samples, "mtok_request_latency_seconds_bucket", endpoint="/generate", le="+Inf") >= 10


def test_every_scrape_reports_the_whole_server(srv):
    """Scrapes on fresh connections land on different workers and still agree."""
    for i in range(5):
        srv.post("/generate", {"text": f"agree {i}", "sampling_params": {"max_new_tokens": 1}})
    wait_for(lambda: len({value(scrape(srv), "mtok_generation_tokens_total") for _ in range(6)}) == 1,
             timeout=5, what="every worker's scrape to agree")


def test_running_gauge_and_restarts(server_factory):
    srv = server_factory("--tokenizer-worker-num", "2", "--engine-step-delay", "0.01")
    conn = srv.conn()
    conn.request("POST", "/generate", body='{"text": "long", "sampling_params": {"max_new_tokens": 2000}}')
    wait_for(lambda: value(scrape(srv), "mtok_num_requests_running") == 1, what="the running gauge")
    conn.close()
    wait_for(lambda: value(scrape(srv), "mtok_num_requests_running") == 0, what="the gauge to fall")
    victim = srv.info()["workers"][0]["pid"]
    os.kill(victim, signal.SIGKILL)
    wait_for(lambda: value(scrape(srv), "mtok_worker_restarts_total") == 1, timeout=5, interval=0.1,
             what="the restart to be counted")
