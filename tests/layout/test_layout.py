"""The house rules that keep mtok readable, held by a test: no module much over
400 lines, no function much over 50, the libraries mtok reimplements (the
tokenizer runtime, the chat template engine, the parsers) import nothing of the
server, and the imports point one way, down :data:`LAYERS`, with no two modules
importing each other."""

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
        for target, _ in imports(path, src):
            if not any(target == a or target.startswith(a + ".") for a in allowed):
                found.setdefault(path, []).append(target)
    assert not found, found


# The layers, bottom to top: a module imports only from its own layer and those
# below it (why this order: test_imports_point_down).  Its layer is its longest prefix here.
LAYERS = [
    ("libraries", ["mtok.tokenizer", "mtok.chat", "mtok.parsers"]),
    ("base", ["mtok", "mtok.validate", "mtok.flags", "mtok.fields", "mtok.procutil"]),
    ("registry", ["mtok.models", "mtok.chat_templates"]),
    ("wire", ["mtok.wire"]),
    ("transport", ["mtok.api.listen", "mtok.api.framing", "mtok.api.connections", "mtok.api.routes",
                   "mtok.api.respond", "mtok.api.server", "mtok.api.admission", "mtok.api.intake",
                   "mtok.api.sse", "mtok.api.loop", "mtok.api.loop_respond",
                   "mtok.api.loop_accept", "mtok.api.loop_conn", "mtok.api.offload"]),
    ("engines", ["mtok.engines"]),
    ("managers", ["mtok.managers"]),
    ("routes", ["mtok.api"]),
    ("processes", ["mtok.worker", "mtok.serve", "mtok.launcher", "mtok.offline", "mtok.settings"]),
    ("bench", ["mtok.bench"]),
]
TRANSPORT_SEES = {"mtok.validate", "mtok.wire.metrics"}  # APIError and parse_json; the metrics it counts into


def module_name(path):
    name = "mtok." + path[: -len(".py")].replace(os.sep, ".")
    return name[: -len(".__init__")] if name.endswith(".__init__") else name


def all_modules():
    return {module_name(path) for path, _ in modules()}


def imports(path, src, known=None):
    """(module, line) for each mtok module that ``path`` imports, at any depth of its
    code (functions and ``if TYPE_CHECKING:`` included); ``from . import x`` is x."""
    known = known or all_modules()
    me = module_name(path)
    package = me if path.endswith("__init__.py") else me.rpartition(".")[0]
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - (node.level - 1)] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            subs = [base + "." + a.name for a in node.names if base + "." + a.name in known]
            targets = subs if len(subs) == len(node.names) else subs + [base]
        elif isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            continue
        for target in targets:
            if target.split(".")[0] == "mtok" and target != me:
                yield target, node.lineno


def layer_of(name):
    best = None
    for rank, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (name == prefix or name.startswith(prefix + ".")) and (best is None or len(prefix) > len(best[1])):
                best = (rank, prefix)
    assert best is not None, f"{name} is in no layer: add it to LAYERS"
    return best[0]


def graph():
    known = all_modules()
    edges = {}
    for path, src in modules():
        for target, line in imports(path, src, known):
            edges.setdefault(module_name(path), {}).setdefault(target, line)
    return edges


def test_imports_point_down():
    """Every import points down :data:`LAYERS` (or stays in its layer).  Why this order:

    - libraries: what mtok reimplements, standing alone (see above).
    - base: what every layer refuses with or reads (APIError and the request
      checks, the settings and request-field tables, the boot handshake), and
      the package itself (its version; its lazy names are imported by name).
    - registry: the served models and their chat templates, made from the
      libraries; the settings check names them.
    - wire: what crosses between processes (messages, settings, the status
      board, metrics).  SamplingParams takes its defaults from the field table,
      so the table is below the wire, beside the settings table.
    - transport: the HTTP server, the event loop and the connection watch.  It
      knows nothing of LLMs: it sits under the engines and the managers, and of
      the layers under it sees only TRANSPORT_SEES.  It is told apart from the
      routes module by module, since both live in mtok.api: the routes are given
      to it (an app's marked methods, mtok.api.routes), so it never imports them,
      and the request handle imports its watch (WATCH_AFTER, ClientDisconnected).
    - engines: plugins the scheduler calls.
    - managers: the process cores and their runners.
    - routes: the rest of mtok.api, above the managers they submit to.
    - processes: the HTTP worker process's runner (mtok.worker), the supervisor,
      and the ways to embed mtok, each wiring routes to managers.
    - bench: the benchmarks, which may use anything.
    """
    transport = LAYERS.index(next(layer for layer in LAYERS if layer[0] == "transport"))
    up, seen = [], []
    for source, targets in sorted(graph().items()):
        mine = layer_of(source)
        for target, line in sorted(targets.items()):
            theirs = layer_of(target)
            if theirs > mine:
                up.append(f"{source}:{line} ({LAYERS[mine][0]}) imports {target} ({LAYERS[theirs][0]})")
            elif mine == transport and theirs < transport and target not in TRANSPORT_SEES:
                seen.append(f"{source}:{line} imports {target}")
    assert not up, "imports that point up:\n" + "\n".join(up)
    assert not seen, "the transport imports more than TRANSPORT_SEES:\n" + "\n".join(seen)


def test_no_two_modules_import_each_other():
    """Nor any longer circle: a split that made one is merged back, or split one way."""
    edges = graph()
    pairs = sorted(f"{a} <-> {b}" for a in edges for b in edges[a] if a < b and a in edges.get(b, {}))
    assert not pairs, pairs
    done, path = set(), []

    def visit(node):
        if node in path:
            return path[path.index(node):] + [node]
        if node in done:
            return None
        path.append(node)
        for target in sorted(edges.get(node, {})):
            circle = visit(target)
            if circle:
                return circle
        path.pop()
        done.add(node)
        return None

    for start in sorted(edges):
        circle = visit(start)
        assert not circle, " -> ".join(circle)
