"""mtok: a multi-process LLM serving frontend built on the standard library.

``mtok.launch(**settings)`` starts the server from Python; ``mtok.Engine(**settings)``
is the same pipeline without HTTP.  Both are imported on first use, so the
server's own processes, which import this package, do not pay for them.
"""

__version__ = "0.1.0"

_LAZY = {"launch": "mtok.launcher", "ServerHandle": "mtok.launcher", "BootError": "mtok.serve",
         "Engine": "mtok.offline", "APIError": "mtok.validate"}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'mtok' has no attribute {name!r}")
