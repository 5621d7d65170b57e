"""The layout of docs/deploy.md, for real: nginx (examples/deploy/nginx.conf)
in front of two mtok frontends that front one ``--skip-tokenizer-init`` mtok.
Streams pass through unbuffered, and SIGTERM to one frontend mid-load loses
no request: it drains what it holds, and nginx sends the rest to the other."""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading

import pytest

from support import ROOT, parse_sse, skip_real, wait_for
from test_upstream_sglang import serving

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow, pytest.mark.real]


@pytest.fixture(autouse=True, scope="module")
def nginx_installed():
    if shutil.which("nginx") is None:
        skip_real("nginx is not installed (apt-get install nginx)")

CONF = os.path.join(ROOT, "examples", "deploy", "nginx.conf")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def nginx_conf(tmp, port, frontends):
    """examples/deploy/nginx.conf with our ports, inside a minimal main config."""
    with open(CONF) as f:
        site = f.read()
    servers = "".join(f"    server 127.0.0.1:{p} max_fails=1 fail_timeout=2s;\n" for p in frontends)
    site = re.sub(r"    server 127\.0\.0\.1:3000\d.*\n", "", site)
    site = site.replace("    keepalive 64;", servers + "    keepalive 64;").replace("listen 8080;",
                                                                                    f"listen 127.0.0.1:{port};")
    temp = "".join(f"    {k}_temp_path {tmp}/{k};\n" for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    user = "user root;\n" if os.geteuid() == 0 else ""
    return (f"{user}daemon off;\npid {tmp}/nginx.pid;\nerror_log {tmp}/error.log warn;\nworker_processes 1;\n"
            f"events {{ worker_connections 512; }}\nhttp {{\n    access_log off;\n{temp}{site}}}\n")


@pytest.fixture
def layout(tmp_path):
    with serving("--skip-tokenizer-init", "--engine-step-delay", "0.005") as engine:
        url = f"sglang:http://{engine.host}:{engine.port}"
        with serving("--engine", url, "--graceful-timeout", "30") as a, serving("--engine", url) as b:
            port = free_port()
            (tmp_path / "nginx.conf").write_text(nginx_conf(tmp_path, port, [a.port, b.port]))
            proc = subprocess.Popen(["nginx", "-c", str(tmp_path / "nginx.conf"), "-p", str(tmp_path)],
                                    stderr=subprocess.PIPE)
            try:
                wait_for(lambda: _get(port, "/health")[0] == 200, 20, what="nginx to answer")
                yield port, engine, a, b
            finally:
                proc.send_signal(signal.SIGQUIT)
                proc.wait(20)


def _get(port, path):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.read()
    except OSError:
        return 0, b""
    finally:
        c.close()


def _post(port, body, stream=False):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        c.request("POST", "/generate", body=json.dumps(dict(body, stream=stream)),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            return r.status, r.read()
        return 200, list(parse_sse(r))[-2] if stream else json.loads(r.read())
    finally:
        c.close()


def test_streams_pass_through_unbuffered(layout):
    port, engine, _, _ = layout
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("POST", "/generate", body=json.dumps({"input_ids": [5, 6, 7], "stream": True,
                                                    "sampling_params": {"max_new_tokens": 400}}),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200 and r.getheader("Content-Type", "").startswith("text/event-stream")
    first = next(parse_sse(r))
    assert len(first["output_ids"]) < 400
    # the first event reached us while the engine host is still generating (nginx passes events on as
    # they come; note nginx 1.22 also forwarded early with proxy_buffering on, so this does not pin that flag)
    assert engine.info()["scheduler"]["num_running"] == 1
    c.close()


def test_sigterm_one_frontend_mid_load_loses_nothing(layout):
    port, _, a, _ = layout
    n, results = 48, {}
    prompts = [[5 + i % 50, 6, 7] for i in range(n)]

    def one(i):
        results[i] = _post(port, {"input_ids": prompts[i], "sampling_params": {"max_new_tokens": 60}},
                           stream=i % 2 == 0)
    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads[: n // 2]:
        t.start()
    wait_for(lambda: len(results) >= 4, 60, what="the first answers")
    a.proc.send_signal(signal.SIGTERM)
    for t in threads[n // 2:]:
        t.start()
    for t in threads:
        t.join(120)
    assert a.proc.wait(60) == 0
    lost = {i: r for i, r in results.items() if r[0] != 200}
    assert not lost and len(results) == n, lost
    for i, (_, body) in results.items():
        assert body["output_ids"] == [prompts[i][p % 3] for p in range(60)], i
    assert _post(port, {"input_ids": [9], "sampling_params": {"max_new_tokens": 2}})[0] == 200
