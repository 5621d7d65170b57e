"""pytest fixtures shared by the test modules; the helpers they use live in
``support.py`` (a plain module: tests import it as ``from support import ...``)."""

from __future__ import annotations

from typing import Any, List

import pytest

from support import Server


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
