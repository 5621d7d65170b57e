"""``mtok.launch``: the whole server from Python, and the handle it returns."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

import mtok
from support import ROOT, Server, children_of, wait_for
from mtok.procutil import pid_alive
from mtok.engines import Engine as EngineBase
from test_lifecycle import leftovers

pytestmark = pytest.mark.fast


class ReverseEngine(EngineBase):
    """Generates the prompt backwards: visibly not the echo engine."""

    def step(self, batch):
        return [r.input_ids[-1 - len(r.output_ids) % len(r.input_ids)] for r in batch]


def reverse_factory(ctx):
    return ReverseEngine(ctx)


def client(handle) -> Server:
    """support's HTTP helpers, pointed at a launched server."""
    c = Server.__new__(Server)
    c.host, c.port = handle.host, handle.port
    return c


def test_launch_serves_until_stopped():
    handle = mtok.launch(port=0, tokenizer_worker_num=2)
    try:
        assert handle.running and handle.port > 0 and handle.url == f"http://127.0.0.1:{handle.port}"
        pids = handle.pids
        assert pids["main"] == handle.pid and len(pids["workers"]) == 2
        kids = children_of(handle.pid)
        assert {pids["scheduler"], *pids["workers"]} <= set(kids)
        assert "detokenizer" not in pids  # it runs in the scheduler's process (--detokenizer inline)
        info = client(handle).info()
        assert info["pid"] == handle.pid and info["processes"]["scheduler"] == pids["scheduler"]
        status, body = client(handle).post("/generate", {"input_ids": [15, 16, 17],
                                                         "sampling_params": {"max_new_tokens": 3}})
        assert status == 200 and body["output_ids"] == [15, 16, 17]
    finally:
        assert handle.stop() == 0
    assert not handle.running
    wait_for(lambda: not [k for k in kids if pid_alive(k)], timeout=5, what="every process to exit")
    assert leftovers(handle.pid) == []
    assert handle.stop() == 0  # stopping twice is harmless


def test_context_manager_and_an_engine_given_as_a_class():
    with mtok.launch(port=0, engine=ReverseEngine) as handle:
        status, body = client(handle).post("/generate", {"input_ids": [15, 16, 17],
                                                         "sampling_params": {"max_new_tokens": 3}})
        assert status == 200 and body["output_ids"] == [17, 16, 15]
        pid = handle.pid
    assert not handle.running and not pid_alive(pid)
    assert leftovers(pid) == []


def test_engine_given_as_a_factory_function_and_stopped_at_once():
    with mtok.launch(port=0, engine=reverse_factory, tokenizer_worker_num=2) as handle:
        status, body = client(handle).post("/generate", {"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 2}})
        assert body["output_ids"] == [2, 1]
        assert handle.stop(graceful=False) == 0


def test_boot_failure_is_an_exception_with_the_reason():
    before = set(children_of(os.getpid()))
    with pytest.raises(mtok.BootError, match="failed to start.*/nonexistent/dir"):
        mtok.launch(port=0, tokenizer_path="/nonexistent/dir")
    wait_for(lambda: set(children_of(os.getpid())) <= before, timeout=5, what="the failed server's processes to exit")


def test_the_port_in_use_is_a_boot_failure():
    with mtok.launch(port=0) as first:
        with pytest.raises(mtok.BootError, match=f"cannot listen on 127.0.0.1:{first.port}"):
            mtok.launch(port=first.port)


def test_wait_returns_when_the_server_stops_by_itself():
    handle = mtok.launch(port=0)
    os.kill(handle.pids["scheduler"], signal.SIGKILL)
    assert handle.wait(30) == 1  # a core process died: the command line's exit status too
    assert leftovers(handle.pid) == []


def test_settings_are_the_command_lines():
    with pytest.raises(TypeError, match="tokenizer_worker_num.*--tokenizer-worker-num"):
        mtok.launch(tokenizer_workers=2)
    with pytest.raises(ValueError, match="--listen-mode: invalid choice"):
        mtok.launch(listen_mode="sideways")
    with pytest.raises(ValueError, match="--port must be in 0..65535"):
        mtok.launch(port=70000)
    with pytest.raises(ValueError, match="argument --max-running-requests: invalid int value"):
        mtok.launch(max_running_requests="many")


def test_engines_that_cannot_be_imported_are_refused_up_front():
    class Local(EngineBase):
        pass

    with pytest.raises(TypeError, match="define it at the top level"):
        mtok.launch(engine=Local)
    with pytest.raises(TypeError, match="define it at the top level"):
        mtok.launch(engine=lambda ctx: ReverseEngine(ctx))


def run_python(code: str, *args: str, timeout: float = 90) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, *args] if not code else [sys.executable, "-c", code], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_an_engine_class_from_an_interactive_session_gets_a_clear_error():
    code = textwrap.dedent("""
        import mtok
        from mtok.engines import Engine
        class Mine(Engine):
            def step(self, batch): return [0] * len(batch)
        try:
            mtok.launch(port=0, engine=Mine)
        except TypeError as e:
            print("refused:", e)
    """)
    out = run_python(code)
    assert out.returncode == 0, out.stderr
    assert "refused:" in out.stdout and "interactive session" in out.stdout and "file.py:ClassName" in out.stdout


def test_a_plain_script_launches_with_its_own_engine_class(tmp_path):
    script = tmp_path / "serve_it.py"
    script.write_text(textwrap.dedent("""
        import json, urllib.request
        import mtok
        from mtok.engines import Engine

        class Constant(Engine):
            def step(self, batch): return [42] * len(batch)

        if __name__ == "__main__":
            with mtok.launch(port=0, engine=Constant) as srv:
                body = json.dumps({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 2}}).encode()
                req = urllib.request.Request(srv.url + "/generate", body, {"Content-Type": "application/json"})
                print(json.loads(urllib.request.urlopen(req).read())["output_ids"])
    """))
    out = run_python("", str(script))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[42, 42]"


def test_the_server_stops_when_its_launcher_dies():
    code = "import mtok, sys; h = mtok.launch(port=0); print('PID', h.pid, flush=True); sys.stdin.read()"
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        line = ""
        while not line.startswith("PID "):  # the server's own ready line comes first
            line = proc.stdout.readline()
            assert line, "the launcher exited"
        server_pid = int(line.split()[1])
        kids = [server_pid, *children_of(server_pid)]
        proc.kill()
        proc.wait()
        wait_for(lambda: not [k for k in kids if pid_alive(k)], timeout=10, what="the orphaned server to stop")
        assert leftovers(server_pid) == []
    finally:
        proc.kill()


def test_an_interactive_session_launches_and_runs_an_engine():
    """Code given with -c, whose __main__ has no file, as in a REPL or a Jupyter
    kernel: neither the launched server nor an Engine's processes need one."""
    code = textwrap.dedent("""
        import json, urllib.request
        import mtok
        srv = mtok.launch(port=0, log_level="warning")
        req = urllib.request.Request(srv.url + "/generate", b'{"input_ids": [15, 16], "sampling_params": {"max_new_tokens": 2}}',
                                     {"Content-Type": "application/json"})
        print("http", json.load(urllib.request.urlopen(req))["output_ids"])
        print("stopped", srv.stop())
        eng = mtok.Engine(log_level="warning")
        print("engine", eng.generate(input_ids=[15, 16], sampling_params={"max_new_tokens": 2})["output_ids"])
        eng.shutdown()
    """)
    out = run_python(code)
    assert out.returncode == 0, out.stderr
    lines = [line for line in out.stdout.splitlines() if not line.startswith("mtok ready")]
    assert lines == ["http [15, 16]", "stopped 0", "engine [15, 16]"], out.stdout


def test_switches_and_repeated_flags_become_the_command_line():
    """Switches, repeatable flags, aliases and values map through the flag table."""
    from mtok.settings import server_args_from, settings_argv

    argv = settings_argv("launch", {"strict_fields": True, "models": ["a=x", "b=y"], "port": 0})
    assert argv == ["--strict-fields", "--model", "a=x", "--model", "b=y", "--port", "0"]
    assert settings_argv("launch", {"strict_fields": False, "model": "a=x"}) == ["--model", "a=x"]
    assert settings_argv("launch", {"model_path": "p", "cors_allow_origins": ["http://a", "http://b"]}) == \
        ["--tokenizer-path", "p", "--cors-allow-origins", "http://a", "http://b"]
    assert server_args_from("launch", {"cors_allow_origins": ["http://a", "http://b"]}).cors_allow_origins == \
        ["http://a", "http://b"]
    with pytest.raises(ValueError, match="strict_fields is False or True"):
        settings_argv("launch", {"strict_fields": "yes"})
