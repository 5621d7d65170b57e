"""A chat request's forced tool choice as an output constraint for the engine.

``tool_choice: "required"`` or a named function cannot be honoured by asking
nicely: as in SGLang, it becomes a JSON schema the output must match (built by
:func:`mtok.parsers.forced.tool_call_schema`), carried in ``json_schema`` of
the request's sampling parameters like any other constraint, and the output
is read back as that JSON (:class:`mtok.parsers.forced.ForcedCalls`), whatever
``--tool-call-parser`` the model has.  ``constraint_from`` names the field
that asked, so an engine that cannot constrain its output (the scheduler
checks each engine's capabilities, :mod:`mtok.engines`) is refused with a 400
that names ``tool_choice`` rather than a field the client never sent.

A forced choice cannot share the output with another constraint
(``response_format``, ``regex``, ``ebnf``, ...): both cannot hold, so the
request is refused, in SGLang's words, rather than one of them dropped.
"""

from __future__ import annotations

import json
from typing import Any, Dict, Optional

from .. import fields
from ..validate import bad
from ..engines import CONSTRAINTS
from ..parsers.forced import ForcedCalls, tool_call_schema
from ..wire.io_struct import SamplingParams


def is_forced(choice: Any) -> bool:
    return choice == "required" or isinstance(choice, dict)


def constrain_tool_choice(body: Dict[str, Any], got: Dict[str, Any], sp: SamplingParams) -> None:
    """Set the constraint a forced ``tool_choice`` asks for on ``sp``.  The tools and the
    choice were judged first (:func:`mtok.api.chat_tools.check_tool_request`: tools given, the
    named one among them, their ``$defs`` consistent); what is left is a clash of constraints."""
    choice = body.get("tool_choice")
    if not is_forced(choice):
        return
    if any(getattr(sp, c) is not None for c in CONSTRAINTS):
        raise bad("tool_choice 'required' or a named tool cannot be combined with response_format, regex, or ebnf: "
                  "the tool-call constraint and the output constraint cannot both be honored.", "tool_choice")
    parallel = fields.value(got, fields.CHAT, "parallel_tool_calls")
    sp.json_schema = json.dumps(tool_call_schema(body["tools"], choice, parallel))  # SGLang's string, byte for byte
    sp.constraint_from = "tool_choice"


def forced_parser(body: Dict[str, Any]) -> Optional[ForcedCalls]:
    """The parser of a forced tool choice's constrained output; None when the choice is not forced."""
    return ForcedCalls(body.get("tools")) if is_forced(body.get("tool_choice")) and body.get("tools") else None
