"""Statement parsing of mtok's Jinja engine (a mixin of :class:`~mtok.chat.parser.Parser`).

Each ``{% tag %}`` becomes a :class:`Node`; bodies are lists of nodes.  The shapes
follow jinja2's: ``for`` has ``target``, ``iter``, ``test``, ``body``, ``else_``;
``if`` has ``test``, ``body``, ``elifs`` and ``else_``; ``set`` has ``target`` and
``value`` (or ``body`` and ``filter`` for a block set); ``macro`` and ``call`` have
``args`` and ``defaults``.  :class:`Node` is declared here, under the parser that
builds expressions of it too, so the two modules import one way.
"""

from __future__ import annotations

from typing import Any, List, Optional, Tuple

_ASSIGNABLE = ("name", "nsref", "tuple")
_END_TAGS = ("endfor", "endif", "endmacro", "endcall", "endfilter", "endset", "endwith", "endgeneration",
             "elif", "else", "endblock", "endraw")


class Node:
    """One node: ``kind`` names it, ``lineno`` locates it, the rest are its fields."""

    __slots__ = ("kind", "lineno", "f")

    def __init__(self, kind: str, lineno: int, **fields: Any):
        self.kind = kind
        self.lineno = lineno
        self.f = fields

    def __getattr__(self, name: str) -> Any:
        try:
            return self.f[name]
        except KeyError:
            raise AttributeError(name) from None

    def __repr__(self) -> str:
        return f"Node({self.kind!r}, {self.f!r})"


class StatementParser:
    s: Any  # the TokenStream, set by Parser

    def subparse(self, end_tags: Optional[Tuple[str, ...]]) -> List[Any]:
        """Nodes until one of ``end_tags`` opens a block (left current) or the template ends."""
        body: List[Any] = []
        s = self.s
        while True:
            kind, value, lineno, _ = s.cur
            if kind == "data":
                s.next()
                body.append(Node("output", lineno, nodes=[Node("const", lineno, value=value)]))
            elif kind == "variable_begin":
                s.next()
                body.append(Node("output", lineno, nodes=[self.tuple()]))
                s.expect("variable_end")
            elif kind == "block_begin":
                s.next()
                if end_tags is not None and s.cur[0] == "name" and s.cur[1] in end_tags:
                    return body
                body.append(self.statement())
                s.expect("block_end")
            elif kind == "eof":
                return body
            else:
                raise s.fail(f"unexpected {kind!r}")

    def statements(self, end_tags: Tuple[str, ...], drop_needle: bool = False) -> List[Any]:
        self.s.skip_op(":")
        self.s.expect("block_end")
        body = self.subparse(end_tags)
        if self.s.cur[0] == "eof":
            raise self.s.fail(f"Unexpected end of template; expected one of {', '.join(end_tags)}")
        if drop_needle:
            self.s.next()
        return body

    def statement(self) -> Any:
        tok = self.s.cur
        if tok[0] != "name":
            raise self.s.fail("tag name expected")
        handler = getattr(self, "stmt_" + tok[1], None)
        if handler is None:
            if tok[1] in _END_TAGS:
                raise self.s.fail(f"Encountered unknown tag {tok[1]!r}: no open block expects it")
            raise self.s.fail(f"Encountered unknown tag {tok[1]!r}")
        return handler()

    def assign_target(self, extra_end: Tuple[str, ...] = (), with_namespace: bool = False,
                      name_only: bool = False) -> Any:
        if name_only:
            tok = self.s.expect("name")
            return Node("name", tok[2], name=tok[1])
        target = self._target_tuple(extra_end, with_namespace)
        if not _can_assign(target):
            raise self.s.fail(f"can't assign to {target.kind!r}")
        return target

    def _target_tuple(self, extra_end: Tuple[str, ...], with_namespace: bool) -> Any:
        lineno = self.s.cur[2]
        items: List[Any] = []
        is_tuple = False
        while True:
            if items:
                self.s.expect("op", ",")
            if self._tuple_end(extra_end):
                break
            items.append(self._target_primary(with_namespace))
            if self.s.is_op(","):
                is_tuple = True
            else:
                break
        if not is_tuple:
            if items:
                return items[0]
            raise self.s.fail("Expected an expression")
        return Node("tuple", lineno, items=items)

    def _target_primary(self, with_namespace: bool) -> Any:
        tok = self.s.cur
        if with_namespace and tok[0] == "name" and self.s.look()[0] == "op" and self.s.look()[1] == ".":
            self.s.next()
            self.s.next()
            attr = self.s.expect("name")[1]
            return Node("nsref", tok[2], name=tok[1], attr=attr)
        return self.primary()

    # -- the tags -----------------------------------------------------------------
    def stmt_for(self) -> Any:
        lineno = self.s.next()[2]
        target = self.assign_target(extra_end=("in",))
        self.s.expect("name", "in")
        iter_ = self.tuple(with_condexpr=False, extra_end=("recursive",))
        test = self.expression() if self.s.skip_name("if") else None
        recursive = self.s.skip_name("recursive")
        body = self.statements(("endfor", "else"))
        else_: List[Any] = []
        if self.s.next()[1] != "endfor":
            else_ = self.statements(("endfor",), drop_needle=True)
        return Node("for", lineno, target=target, iter=iter_, test=test, body=body, else_=else_,
                     recursive=recursive)

    def stmt_if(self) -> Any:
        lineno = self.s.next()[2]
        branches = []
        else_: List[Any] = []
        while True:
            test = self.tuple(with_condexpr=False)
            body = self.statements(("elif", "else", "endif"))
            branches.append((test, body))
            tag = self.s.next()[1]
            if tag == "elif":
                continue
            if tag == "else":
                else_ = self.statements(("endif",), drop_needle=True)
            break
        return Node("if", lineno, branches=branches, else_=else_)

    def stmt_set(self) -> Any:
        lineno = self.s.next()[2]
        target = self.assign_target(with_namespace=True)
        if self.s.skip_op("="):
            return Node("set", lineno, target=target, value=self.tuple())
        filter_node = self.filter(None)
        body = self.statements(("endset",), drop_needle=True)
        return Node("setblock", lineno, target=target, filter=filter_node, body=body)

    def signature(self) -> Tuple[List[str], List[Any]]:
        args: List[str] = []
        defaults: List[Any] = []
        self.s.expect("op", "(")
        while not self.s.is_op(")"):
            if args:
                self.s.expect("op", ",")
            args.append(self.assign_target(name_only=True).name)
            if self.s.skip_op("="):
                defaults.append(self.expression())
            elif defaults:
                raise self.s.fail("non-default argument follows default argument")
        self.s.expect("op", ")")
        return args, defaults

    def stmt_macro(self) -> Any:
        lineno = self.s.next()[2]
        name = self.assign_target(name_only=True).name
        args, defaults = self.signature()
        body = self.statements(("endmacro",), drop_needle=True)
        return Node("macro", lineno, name=name, args=args, defaults=defaults, body=body)

    def stmt_call(self) -> Any:
        lineno = self.s.next()[2]
        args, defaults = self.signature() if self.s.is_op("(") else ([], [])
        call = self.expression()
        if call.kind != "call":
            raise self.s.fail("expected call")
        body = self.statements(("endcall",), drop_needle=True)
        return Node("callblock", lineno, args=args, defaults=defaults, call=call, body=body)

    def stmt_filter(self) -> Any:
        lineno = self.s.next()[2]
        filter_node = self.filter(None, start_inline=True)
        body = self.statements(("endfilter",), drop_needle=True)
        return Node("filterblock", lineno, filter=filter_node, body=body)

    def stmt_with(self) -> Any:
        lineno = self.s.next()[2]
        targets: List[Any] = []
        values: List[Any] = []
        while self.s.cur[0] != "block_end":
            if targets:
                self.s.expect("op", ",")
            targets.append(self.assign_target())
            self.s.expect("op", "=")
            values.append(self.expression())
        body = self.statements(("endwith",), drop_needle=True)
        return Node("with", lineno, targets=targets, values=values, body=body)

    def stmt_generation(self) -> Any:
        lineno = self.s.next()[2]
        body = self.statements(("endgeneration",), drop_needle=True)
        return Node("with", lineno, targets=[], values=[], body=body)

    def stmt_print(self) -> Any:
        lineno = self.s.next()[2]
        return Node("output", lineno, nodes=[self.tuple()])

    def stmt_break(self) -> Any:
        return Node("break", self.s.next()[2])

    def stmt_continue(self) -> Any:
        return Node("continue", self.s.next()[2])


def _can_assign(node: Any) -> bool:
    if node.kind == "tuple":
        return all(_can_assign(item) for item in node.items)
    return node.kind in ("name", "nsref")
