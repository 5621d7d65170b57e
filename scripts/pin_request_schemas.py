"""Record the request fields of the pinned SGLang, vLLM and OpenAI schemas.

mtok's field table (``mtok/fields.py``) must know every request field these
schemas define, and accept each field it refuses at the schema's default.
CI has neither sglang nor vllm installed, so this script reads their sources
(unpacked wheels, or installed packages) with ``ast`` -- nothing is imported --
and writes the field names, and the defaults written as literals (``= 0``,
``Field(default=True)``, ``default_factory=list``), to
``tests/data/pinned_request_fields.json``, which ``tests/api/test_fields.py``
walks the table against.  A package not given keeps what the file has for it.

    python scripts/pin_request_schemas.py --sglang /work/wheels/sglang/sglang \\
        --vllm /work/wheels/vllm/vllm --openai "$(python -c 'import openai,os;print(os.path.dirname(openai.__file__))')" \\
        --label sglang=0.5.23 --label vllm=0.33.0
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import sys
from typing import Any, Dict, List

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "pinned_request_fields.json")

# schema name -> (package, [source files searched for the class and its bases], class, kind)
SCHEMAS = {
    "sglang.GenerateReqInput": ("sglang", ["srt/managers/io_struct.py"], "GenerateReqInput", "class"),
    "sglang.EmbeddingReqInput": ("sglang", ["srt/managers/io_struct.py"], "EmbeddingReqInput", "class"),
    "sglang.SamplingParams": ("sglang", ["srt/sampling/sampling_params.py"], "SamplingParams", "api"),
    "sglang.CompletionRequest": ("sglang", ["srt/entrypoints/openai/protocol.py"], "CompletionRequest", "class"),
    "sglang.ChatCompletionRequest": ("sglang", ["srt/entrypoints/openai/protocol.py"], "ChatCompletionRequest",
                                     "class"),
    "sglang.EmbeddingRequest": ("sglang", ["srt/entrypoints/openai/protocol.py"], "EmbeddingRequest", "class"),
    "vllm.CompletionRequest": ("vllm", ["entrypoints/openai/completion/protocol.py"], "CompletionRequest", "class"),
    "vllm.ChatCompletionRequest": ("vllm", ["entrypoints/openai/chat_completion/protocol.py"],
                                   "ChatCompletionRequest", "class"),
    "vllm.EmbeddingCompletionRequest": ("vllm", ["entrypoints/pooling/embed/protocol.py",
                                                 "entrypoints/pooling/base/protocol.py"],
                                        "EmbeddingCompletionRequest", "class"),
    "openai.CompletionCreateParams": ("openai", ["types/completion_create_params.py"],
                                      "CompletionCreateParamsBase", "class"),
    "openai.ChatCompletionCreateParams": ("openai", ["types/chat/completion_create_params.py"],
                                          "CompletionCreateParamsBase", "class"),
    "openai.EmbeddingCreateParams": ("openai", ["types/embedding_create_params.py"], "EmbeddingCreateParams",
                                     "class"),
}


def _classes(paths: List[str]) -> Dict[str, ast.ClassDef]:
    out: Dict[str, ast.ClassDef] = {}
    for path in paths:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                out.setdefault(node.name, node)
    return out


def _base_name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Subscript):
        return _base_name(node.value)
    return ""


def class_fields(classes: Dict[str, ast.ClassDef], name: str) -> List[str]:
    """Annotated attributes of a class and of its bases found in the same files."""
    node = classes[name]
    names: List[str] = []
    for base in node.bases:
        if _base_name(base) in classes:
            names += class_fields(classes, _base_name(base))
    for stmt in node.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            ann = ast.unparse(stmt.annotation) if hasattr(ast, "unparse") else ""
            if not stmt.target.id.startswith("_") and "ClassVar" not in ann:
                names.append(stmt.target.id)
    return list(dict.fromkeys(names))


def _literal_default(stmt: ast.AnnAssign) -> Any:
    """The default of a field, when it is a literal; _NONE when it has none or is computed."""
    value = stmt.value
    if isinstance(value, ast.Call) and _base_name(value.func) == "Field":
        keywords = {k.arg: k.value for k in value.keywords}
        if "default_factory" in keywords:
            return {"list": [], "dict": {}}.get(_base_name(keywords["default_factory"]), _NONE)
        value = keywords.get("default", value.args[0] if value.args else None)
    if value is None:
        return _NONE
    try:
        return ast.literal_eval(value)
    except ValueError:
        return _NONE


_NONE = object()


def class_defaults(classes: Dict[str, ast.ClassDef], name: str, names: List[str]) -> Dict[str, Any]:
    """The literal defaults of ``names`` in a class and its bases (a subclass's own win)."""
    node = classes[name]
    out: Dict[str, Any] = {}
    for base in node.bases:
        if _base_name(base) in classes:
            out.update(class_defaults(classes, _base_name(base), names))
    for stmt in node.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id in names:
            default = _literal_default(stmt)
            if default is _NONE:
                out.pop(stmt.target.id, None)
            else:
                out[stmt.target.id] = default
    return out


def api_fields(classes: Dict[str, ast.ClassDef], name: str, source: str) -> List[str]:
    """SGLang's SamplingParams: the fields above its "Internal fields" comment."""
    cut = next((i + 1 for i, line in enumerate(source.splitlines()) if "Internal fields" in line), None)
    if cut is None:
        raise LookupError(f"{name}: no 'Internal fields' marker; check the schema by hand")
    node = classes[name]
    return [s.target.id for s in node.body
            if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name) and s.lineno < cut]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sglang", help="the sglang package directory")
    p.add_argument("--vllm", help="the vllm package directory")
    p.add_argument("--openai", help="the openai package directory")
    p.add_argument("--out", default=OUT)
    p.add_argument("--label", action="append", default=[], metavar="PKG=VERSION",
                   help="the version to record when the sources do not say (e.g. sglang=0.5.23)")
    ns = p.parse_args()
    roots = {pkg: root for pkg, root in (("sglang", ns.sglang), ("vllm", ns.vllm), ("openai", ns.openai)) if root}
    kept: Dict[str, Any] = {"versions": {}, "schemas": {}, "defaults": {}}
    if os.path.isfile(ns.out):
        with open(ns.out, encoding="utf-8") as f:
            kept.update(json.load(f))
    result, defaults = dict(kept["schemas"]), dict(kept["defaults"])
    for schema, (pkg, files, cls, kind) in SCHEMAS.items():
        if pkg not in roots:
            continue
        paths = [os.path.join(roots[pkg], f) for f in files]
        classes = _classes(paths)
        if kind == "class":
            result[schema] = sorted(class_fields(classes, cls))
        else:
            with open(paths[0], encoding="utf-8") as f:
                result[schema] = sorted(api_fields(classes, cls, f.read()))
        defaults[schema] = class_defaults(classes, cls, result[schema])
    versions = dict(kept["versions"], **{pkg: _version(root) for pkg, root in roots.items()})
    versions.update(dict(x.split("=", 1) for x in ns.label))
    with open(ns.out, "w", encoding="utf-8") as f:
        json.dump({"versions": versions, "schemas": result, "defaults": defaults}, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"wrote {sum(map(len, result.values()))} fields of {len(result)} schemas to {ns.out}")
    return 0


def _version(root: str) -> str:
    """The package version from its version file or a dist-info beside it; --label overrides."""
    pattern = re.compile(r"(\d+\.\d+\.\d+[\w.]*)")
    for name in ("version.py", "_version.py"):
        path = os.path.join(root, name)
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                m = pattern.search(f.read())
            if m:
                return m.group(1)
    parent = os.path.dirname(os.path.abspath(root))
    for entry in sorted(os.listdir(parent)):
        if entry.startswith(os.path.basename(root) + "-") and entry.endswith(".dist-info"):
            return entry[len(os.path.basename(root)) + 1: -len(".dist-info")]
    return "unknown"


if __name__ == "__main__":
    sys.exit(main())
