"""The engine protocol: what the scheduler asks of a model.

An engine is a class constructed with an :class:`EngineContext`.  The
scheduler calls :meth:`Engine.step` once per iteration with every running
request and expects one new token id for each, in order.  Requests join and
leave the batch between steps (continuous batching); ``add_request`` and
``finish_request`` let an engine keep per-request state such as a KV cache.

A request, as an engine sees it, has ``rid``, ``input_ids``, ``output_ids`` (the
tokens generated so far) and ``sampling_params`` (:class:`mtok.io_struct.SamplingParams`).

``--engine module:attr`` loads a user engine; ``examples/custom_engine.py`` is one.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from dataclasses import dataclass
from typing import Any, List, Optional, Sequence


@dataclass
class EngineContext:
    model_name: str
    tokenizer: Any  # mtok.tokenizer.Tokenizer
    step_delay: float = 0.0
    options: Optional[dict] = None


class Engine:
    """Base class with no-op hooks; subclasses implement :meth:`step`."""

    def __init__(self, ctx: EngineContext):
        self.ctx = ctx

    def add_request(self, req: Any) -> None:
        """A request joins the running batch."""

    def finish_request(self, req: Any) -> None:
        """A request left the batch (finished or aborted)."""

    def step(self, batch: Sequence[Any]) -> List[int]:
        raise NotImplementedError

    def embed(self, batch: Sequence[Any]) -> List[List[float]]:
        raise NotImplementedError(f"{type(self).__name__} does not produce embeddings")


BUILTIN = {
    "echo": "mtok.engines.echo:EchoEngine",
}


def _import(module: str) -> Any:
    if not module.endswith(".py"):
        return importlib.import_module(module)
    name = "mtok_user_engine_" + os.path.splitext(os.path.basename(module))[0]
    spec = importlib.util.spec_from_file_location(name, module)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {module!r}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def load_engine(spec: str, ctx: EngineContext) -> Engine:
    """``echo``, ``package.module:attr`` or ``path/to/file.py:attr``, where attr is
    an Engine class or a factory taking an EngineContext."""
    target = BUILTIN.get(spec, spec)
    module_name, sep, attr = target.rpartition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"--engine must be 'echo', 'module:attr' or 'file.py:attr', not {spec!r}")
    obj: Any = _import(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    engine = obj(ctx)
    if not callable(getattr(engine, "step", None)):
        raise TypeError(f"engine {spec!r} has no step() method")
    return engine
