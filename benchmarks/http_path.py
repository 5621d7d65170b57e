"""The CPU one request costs mtok's HTTP layer alone: read, parse, route, answer.

    python benchmarks/http_path.py [--requests 20000] [--rounds 5] [--body-bytes 200]

No tokenizer, no scheduler, no other process: an in-process
:class:`mtok.api.server.HTTPServer` with one route that parses the JSON body and
answers a small JSON object, and one client thread that sends the same request
(POST, Host, Content-Type, Content-Length, a JSON body) over one kept-alive
loopback connection, waiting for each answer.  The figure is the process's CPU
time per request (server thread and client together; the client is a few socket
calls, the same for any version of the server), the median of ``--rounds``.  One
thread at a time runs, so on a loaded machine this moves far less than a
throughput figure does; run it from two checkouts to compare two versions of
mtok/api/server.py and mtok/api/framing.py.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import threading
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from mtok.api.routes import route  # noqa: E402
from mtok.api.server import HTTPServer  # noqa: E402


class App:
    @route("POST", "/tokenize")
    def tokenize(self, req: Any) -> Any:
        body = req.json()
        return {"tokens": [1, 2, 3], "count": 3, "prompt_chars": len(body["prompt"])}


def request_bytes(port: int, body_bytes: int) -> bytes:
    body = json.dumps({"prompt": "x" * body_bytes}).encode()
    return (f"POST /tokenize HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def read_response(sock: socket.socket, buf: bytearray) -> None:
    """One response off the socket (by its Content-Length); what follows stays in ``buf``."""
    while True:
        end = buf.find(b"\r\n\r\n")
        if end >= 0:
            head = bytes(buf[:end]).lower()
            length = int(head.split(b"content-length: ")[1].split(b"\r\n")[0])
            total = end + 4 + length
            if len(buf) >= total:
                del buf[:total]
                return
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        buf += chunk


def one_round(port: int, payload: bytes, n: int) -> float:
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = bytearray()
        for _ in range(200):  # warm-up
            sock.sendall(payload)
            read_response(sock, buf)
        cpu = time.process_time()
        for _ in range(n):
            sock.sendall(payload)
            read_response(sock, buf)
        return (time.process_time() - cpu) / n


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=20000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--body-bytes", type=int, default=200)
    args = p.parse_args()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    httpd = HTTPServer(sock, App(), None, 1 << 20, 30.0)
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.25}, daemon=True).start()
    port = sock.getsockname()[1]
    payload = request_bytes(port, args.body_bytes)
    rounds = [one_round(port, payload, args.requests) for _ in range(args.rounds)]
    print(json.dumps({"us_cpu_per_request": round(1e6 * statistics.median(rounds), 2),
                      "rounds_us": [round(1e6 * r, 2) for r in rounds], "requests": args.requests}))
    httpd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
