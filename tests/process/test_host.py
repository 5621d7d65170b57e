"""Constrained hosts: a server that may write only to its temp dir (down to a
read-only file system where the test may make one), a platform without
SO_REUSEPORT.  (No /dev/shm: tests/process/test_no_shm.py.)"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

from support import READY, ROOT, Server, children_of, remove_log_with, wait_for

from mtok.procutil import pid_alive
from mtok.bench.servers import ReadyProcess

pytestmark = pytest.mark.fast


def generate_ok(srv: Server) -> None:
    status, body = srv.post("/generate", {"input_ids": [15, 16, 17], "sampling_params": {"max_new_tokens": 3}})
    assert status == 200 and body["output_ids"] == [15, 16, 17], body


@pytest.fixture
def short_tmp():
    """A writable directory with a short path: socket paths must fit AF_UNIX's 108 bytes."""
    path = tempfile.mkdtemp(prefix="w", dir="/tmp")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_writes_only_to_its_temp_dir(short_tmp):
    """With TMPDIR pointed somewhere and no shared memory, everything mtok
    creates is under TMPDIR, and is gone after a stop."""
    tmp = short_tmp
    srv = Server("--tokenizer-worker-num", "2",
                 env={"TMPDIR": str(tmp), "MTOK_SHM_DIR": "/nonexistent/mtok-no-shm", "PYTHONDONTWRITEBYTECODE": "1"})
    try:
        generate_ok(srv)
        made = sorted(os.listdir(tmp))
        assert len(made) == 1 and made[0].startswith(f"mtok-{srv.pid}-"), made
        assert glob.glob(f"/tmp/mtok-{srv.pid}-*") == [] and glob.glob(f"/dev/shm/mtok_*_{srv.pid}") == []
    finally:
        assert srv.stop() == 0, srv.stderr()
    assert os.listdir(tmp) == []


def test_default_listen_mode_needs_no_reuseport(tmp_path):
    """A Python whose socket module has no SO_REUSEPORT (as on some platforms):
    several workers still share the port; asking for reuseport is a clear boot failure."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import socket\ndel socket.SO_REUSEPORT\n")
    env = {"PYTHONPATH": os.pathsep.join([str(site), ROOT])}
    srv = Server("--tokenizer-worker-num", "2", env=env)
    try:
        kids = children_of(srv.pid)
        for _ in range(4):
            generate_ok(srv)
    finally:
        assert srv.stop() == 0, srv.stderr()
    wait_for(lambda: not [k for k in kids if pid_alive(k)], timeout=5, what="every child to exit")
    refused = Server("--tokenizer-worker-num", "2", "--listen-mode", "reuseport", env=env, expect_ready=False)
    assert refused.proc.wait(60) == 3
    assert "no SO_REUSEPORT" in refused.stderr()


READ_ONLY = r"""
set -e
w="$1"; shift
mount --bind "$w" "$w"                       # the one writable place, a mount of its own
for m in $(awk '{print $2}' /proc/self/mounts | sort -u); do
    [ "$m" = "$w" ] || mount -o remount,bind,ro "$m" 2>/dev/null || true
done
if touch /tmp/mtok-ro-probe 2>/dev/null || touch "$(dirname "$w")/mtok-ro-probe" 2>/dev/null; then
    echo "the file system is still writable" >&2; exit 97
fi
exec env TMPDIR="$w" "$@"
"""


def read_only_host_available() -> bool:
    if not shutil.which("unshare") or os.geteuid() != 0:
        return False
    probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "true"], capture_output=True)
    return probe.returncode == 0


@pytest.mark.skipif(not read_only_host_available(), reason="needs root and unshare(1) to make a read-only mount namespace")
def test_serves_on_a_read_only_file_system(short_tmp):
    """Every mount read-only (/dev/shm included) except one temp dir: the server
    finds shared memory unusable by itself, keeps its board in the temp dir, serves."""
    cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-c", READ_ONLY, "sh", short_tmp,
           sys.executable, "-m", "mtok.serve", "--port", "0", "--tokenizer-worker-num", "2"]
    proc = ReadyProcess(cmd, dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=ROOT), "mtok-test-ro-")
    remove_log_with(proc)
    try:
        m = proc.wait_ready(READY, 60)
        assert m is not None, proc.stderr()
        srv = Server.__new__(Server)
        srv.host, srv.port = m.group(1), int(m.group(2))
        for _ in range(3):
            generate_ok(srv)
        assert srv.get("/health") == (200, {"status": "ok"})
        assert "no usable shared memory" in proc.stderr()
        assert [p for p in os.listdir(short_tmp) if p.startswith("mtok-")]
    finally:
        assert proc.stop() == 0, proc.stderr()
    assert os.listdir(short_tmp) == []
