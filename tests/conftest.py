"""pytest fixtures shared by the test modules; the helpers they use live in
``support.py`` (a plain module: tests import it as ``from support import ...``)."""

from __future__ import annotations

from typing import Any, List

import pytest

from support import STARTED, Server

# The real-vLLM fixtures (session-scoped boots shared by every module that uses them).
pytest_plugins = ("real_vllm_fixtures",)


@pytest.fixture(scope="module")
def server_factory():
    started: List[Server] = []

    def start(*args: str, **kw: Any) -> Server:
        srv = Server(*args, **kw)
        started.append(srv)
        return srv

    yield start
    for srv in started:
        srv.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failing test's report carries the end of every live server's log (a
    worker replaced, a traceback): what the client saw is half the story."""
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" or not report.failed:
        return
    for srv in list(STARTED):
        try:
            tail = srv.stderr()[-3000:]
        except OSError:
            continue
        if tail.strip():
            report.sections.append((f"mtok server (pid {srv.pid}, {' '.join(srv.args)}) log, the end", tail))
