"""Settings given as Python keyword arguments, read through the command line's table.

``mtok.launch(**settings)`` and ``mtok.Engine(**settings)`` take the same
settings as ``python -m mtok.serve``: each keyword is a flag's name with
underscores (``tokenizer_worker_num=2`` is ``--tokenizer-worker-num 2``), and
the value goes through the very argparse parser the command line uses, so
types, choices and defaults are declared once, in ``ServerArgs.add_cli_args``.
An unknown keyword is a TypeError naming the closest flag.

An engine may also be given as a class or a factory function; the scheduler
runs in a fresh process, so it travels as the name it can be imported by
(:func:`engine_spec`).
"""

from __future__ import annotations

import argparse
import difflib
import os
import sys
from typing import Any, Dict, List

from .wire.args import ServerArgs


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise ValueError(message)


def _parser() -> _Parser:
    parser = _Parser(prog="mtok", add_help=False)
    ServerArgs.add_cli_args(parser)
    return parser


def _keywords(parser: argparse.ArgumentParser) -> Dict[str, argparse.Action]:
    """keyword -> its flag: every option string with underscores, and the dest."""
    table: Dict[str, argparse.Action] = {}
    for action in parser._actions:
        for opt in action.option_strings:
            table[opt.lstrip("-").replace("-", "_")] = action
        table.setdefault(action.dest, action)
    return table


def keyword_names() -> List[str]:
    return sorted(_keywords(_parser()))


def server_args_from(caller: str, settings: Dict[str, Any]) -> ServerArgs:
    """ServerArgs from keyword settings, as the command line would make them.

    TypeError for an unknown keyword (naming the closest flag); ValueError for a
    value the command line would refuse, with its message.
    """
    parser = _parser()
    args = ServerArgs.from_cli_args(parser.parse_args(settings_argv(parser, caller, settings)))
    args.check()
    return args


def settings_argv(parser: argparse.ArgumentParser, caller: str, settings: Dict[str, Any]) -> List[str]:
    """The command line that says what ``settings`` say."""
    table = _keywords(parser)
    argv: List[str] = []
    for key, value in settings.items():
        action = table.get(key)
        if action is None:
            raise TypeError(f"{caller}() got an unexpected keyword argument {key!r}{_suggest(key, table)}")
        if value is None:
            continue
        flag = action.option_strings[0]
        if action.nargs == 0:  # a switch: store_true and the like
            if value == action.const:
                argv.append(flag)
            elif value != action.default:
                raise ValueError(f"{key} is {action.default!r} or {action.const!r} (the flag {flag}), not {value!r}")
            continue
        if action.dest == "engine":
            value = engine_spec(value)
        values = value if isinstance(action, argparse._AppendAction) and isinstance(value, (list, tuple)) else [value]
        for v in values:
            argv += [flag, str(v)]
    return argv


def _suggest(key: str, table: Dict[str, argparse.Action]) -> str:
    close = difflib.get_close_matches(key, list(table), n=1, cutoff=0.5)
    if not close:
        return f"; the settings are the flags of python -m mtok.serve: {', '.join(sorted(table))}"
    action = table[close[0]]
    return f"; did you mean {close[0]}= (the flag {action.option_strings[0]})?"


def engine_spec(engine: Any) -> str:
    """The ``--engine`` string for an engine given as a string, a class or a factory.

    The scheduler is a spawned process: it imports the engine by module and
    name.  A class defined in a script's ``__main__`` is found by the script's
    path (so the script must keep its top level under ``if __name__ ==
    "__main__":``); one defined in an interactive session, inside a function,
    or a lambda or ``functools.partial``, has no name to import by, and is
    refused here rather than failing inside the scheduler.
    """
    if isinstance(engine, str):
        return engine
    module = getattr(engine, "__module__", None)
    qualname = getattr(engine, "__qualname__", None)
    if not callable(engine) or not module or not qualname:
        raise TypeError(f"engine must be 'echo', 'module:attr', an engine class or a factory function, not {engine!r}")
    where = f"{qualname} (module {module})"
    if "<" in qualname:  # <locals>, <lambda>
        raise TypeError(f"the engine {where} cannot be imported by name in the scheduler process: "
                        "define it at the top level of a module")
    mod = sys.modules.get(module)
    if module == "__main__":
        path = getattr(mod, "__file__", None)
        if not path:
            raise TypeError(
                f"the engine {where} is defined in an interactive session; the scheduler runs in a new "
                "process (spawn) and cannot import it from there: put it in a .py file and import it, or "
                "pass engine='path/to/file.py:ClassName'")
        module = os.path.abspath(path)
    obj: Any = mod
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    if obj is not engine:
        raise TypeError(f"the engine {where} is not reachable as {qualname} in its module; the scheduler "
                        "could not import it")
    return f"{module}:{qualname}"
