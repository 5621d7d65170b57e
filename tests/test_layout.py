"""The house rules that keep mtok readable, held by a test: no module much over
400 lines, no function much over 50, and the libraries mtok reimplements
(the tokenizer runtime, the chat template engine, the parsers) import nothing
of the server."""

from __future__ import annotations

import ast
import os

import pytest

from support import ROOT

pytestmark = [pytest.mark.fast, pytest.mark.unit]

PACKAGE = os.path.join(ROOT, "mtok")
MAX_MODULE_LINES = 420  # "about 400"
MAX_FUNCTION_LINES = 55  # "about 50"
LIBRARIES = {"tokenizer/pyrt": "mtok.tokenizer.pyrt", "chat": "mtok.chat", "parsers": "mtok.parsers"}
# Modules allowed past the cap, each with its reason: a split that would make two
# files import each other is worse than a long file (issue 24).
LONG_MODULES = {
    "chat/filters.py": "the filters and the tests name each other's tables (`x is filter`; `select` applies tests)",
}


def modules():
    for folder, _, files in os.walk(PACKAGE):
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8") as f:
                    yield os.path.relpath(path, PACKAGE), f.read()


def test_no_module_is_much_over_400_lines():
    long = {path: src.count("\n") for path, src in modules()
            if src.count("\n") > MAX_MODULE_LINES and path not in LONG_MODULES}
    assert not long, f"split these by role: {long}"


def test_no_function_is_much_over_50_lines():
    long = {}
    for path, src in modules():
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                size = node.end_lineno - node.lineno + 1
                if size > MAX_FUNCTION_LINES:
                    long[f"{path}:{node.lineno} {node.name}"] = size
    assert not long, f"shorten these: {long}"


@pytest.mark.parametrize("folder", sorted(LIBRARIES))
def test_a_reimplemented_library_imports_nothing_of_the_server(folder):
    own = LIBRARIES[folder]
    allowed = {own, "mtok.tokenizer"} if folder == "tokenizer/pyrt" else {own}
    found = {}
    for path, src in modules():
        if not path.startswith(folder + os.sep):
            continue
        package = "mtok." + os.path.dirname(path).replace(os.sep, ".")
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                if target.startswith("mtok") and not any(target == a or target.startswith(a + ".") for a in allowed):
                    found.setdefault(path, []).append(target)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("mtok") and not any(alias.name.startswith(a) for a in allowed):
                        found.setdefault(path, []).append(alias.name)
    assert not found, found
