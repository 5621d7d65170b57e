"""Parser of mtok's Jinja engine: tokens to a tree of :class:`~mtok.chat.statements.Node`.

The grammar and the precedence are jinja2's (from loosest to tightest): conditional
expression, ``or``, ``and``, ``not``, comparisons (``== != < <= > >= in``, ``not in``),
``+ -``, ``~``, ``* / // %``, ``**``, unary ``- +``, then a primary with its postfix
(``.attr``, ``[item]``, ``[a:b:c]``, calls) and its filters/tests (``|f``, ``is t``),
which bind tighter than any binary operator (``a ~ b|upper`` filters ``b`` only).

Statements: ``if/elif/else``, ``for ... in ... [if ...] [recursive] / else``, ``set`` (plain,
tuple, ``ns.attr``, block), ``macro``, ``call``, ``filter``, ``with``, ``break``,
``continue`` (transformers enables ``loopcontrols``), ``generation`` (transformers'
tag; renders its body), ``raw`` (in the lexer).  Template inheritance and includes
(``extends``, ``block``, ``include``, ``import``) need a loader, which chat templates
never have; they are syntax errors here.
"""

from __future__ import annotations

from typing import Any, List, Optional, Tuple

from .lexer import TokenStream, tokenize
from .statements import Node, StatementParser


COMPARE_OPS = ("==", "!=", "<", "<=", ">", ">=")
_TUPLE_END = ("variable_end", "block_end")


class Parser(StatementParser):
    """Expressions here; statements in :class:`~mtok.chat.statements.StatementParser`."""

    def __init__(self, source: str):
        self.s = TokenStream(tokenize(source))

    # -- expressions -------------------------------------------------------------
    def expression(self, with_condexpr: bool = True) -> Node:
        return self.condexpr() if with_condexpr else self.or_()

    def condexpr(self) -> Node:
        lineno = self.s.cur[2]
        expr = self.or_()
        while self.s.skip_name("if"):
            test = self.or_()
            other = self.condexpr() if self.s.skip_name("else") else None
            expr = Node("cond", lineno, test=test, then=expr, other=other)
        return expr

    def or_(self) -> Node:
        left = self.and_()
        while self.s.is_name("or"):
            lineno = self.s.next()[2]
            left = Node("or", lineno, left=left, right=self.and_())
        return left

    def and_(self) -> Node:
        left = self.not_()
        while self.s.is_name("and"):
            lineno = self.s.next()[2]
            left = Node("and", lineno, left=left, right=self.not_())
        return left

    def not_(self) -> Node:
        if self.s.is_name("not"):
            lineno = self.s.next()[2]
            return Node("not", lineno, node=self.not_())
        return self.compare()

    def compare(self) -> Node:
        lineno = self.s.cur[2]
        expr = self.math1()
        ops: List[Tuple[str, Node]] = []
        while True:
            tok = self.s.cur
            if tok[0] == "op" and tok[1] in COMPARE_OPS:
                self.s.next()
                ops.append((tok[1], self.math1()))
            elif self.s.skip_name("in"):
                ops.append(("in", self.math1()))
            elif self.s.is_name("not") and self.s.look()[0] == "name" and self.s.look()[1] == "in":
                self.s.next()
                self.s.next()
                ops.append(("not in", self.math1()))
            else:
                break
        return Node("compare", lineno, expr=expr, ops=ops) if ops else expr

    def _binary(self, ops: Tuple[str, ...], operand: Any) -> Node:
        left = operand()
        while self.s.cur[0] == "op" and self.s.cur[1] in ops:
            _, op, lineno, _ = self.s.next()
            left = Node("binop", lineno, op=op, left=left, right=operand())
        return left

    def math1(self) -> Node:
        return self._binary(("+", "-"), self.concat)

    def concat(self) -> Node:
        lineno = self.s.cur[2]
        args = [self.math2()]
        while self.s.skip_op("~"):
            args.append(self.math2())
        return args[0] if len(args) == 1 else Node("concat", lineno, items=args)

    def math2(self) -> Node:
        return self._binary(("*", "/", "//", "%"), self.pow)

    def pow(self) -> Node:
        return self._binary(("**",), self.unary)

    def unary(self, with_filter: bool = True) -> Node:
        tok = self.s.cur
        if tok[0] == "op" and tok[1] in ("-", "+"):
            self.s.next()
            node = Node("unary", tok[2], op=tok[1], node=self.unary(False))
        else:
            node = self.primary()
        node = self.postfix(node)
        return self.filter_expr(node) if with_filter else node

    def primary(self) -> Node:
        kind, value, lineno, _ = tok = self.s.cur
        if kind == "name":
            self.s.next()
            if value in ("true", "false", "True", "False"):
                return Node("const", lineno, value=value in ("true", "True"))
            if value in ("none", "None"):
                return Node("const", lineno, value=None)
            return Node("name", lineno, name=value)
        if kind == "string":
            parts = []
            while self.s.cur[0] == "string":
                parts.append(self.s.next()[1])
            return Node("const", lineno, value="".join(parts))
        if kind in ("integer", "float"):
            self.s.next()
            return Node("const", lineno, value=value)
        if self.s.skip_op("("):
            node = self.tuple(explicit_parentheses=True)
            self.s.expect("op", ")")
            return node
        if self.s.is_op("["):
            return self.list_()
        if self.s.is_op("{"):
            return self.dict_()
        got = "end of template" if kind == "eof" else (value if value is not None else kind)
        raise self.s.fail(f"unexpected {got!r}", tok)

    def tuple(self, simplified: bool = False, with_condexpr: bool = True, extra_end: Tuple[str, ...] = (),
              explicit_parentheses: bool = False) -> Node:
        lineno = self.s.cur[2]
        args: List[Node] = []
        is_tuple = False
        while True:
            if args:
                self.s.expect("op", ",")
            if self._tuple_end(extra_end):
                break
            args.append(self.primary() if simplified else self.expression(with_condexpr))
            if self.s.is_op(","):
                is_tuple = True
            else:
                break
        if not is_tuple:
            if args:
                return args[0]
            if not explicit_parentheses:
                raise self.s.fail("Expected an expression")
        return Node("tuple", lineno, items=args)

    def _tuple_end(self, extra_end: Tuple[str, ...]) -> bool:
        tok = self.s.cur
        if tok[0] in _TUPLE_END or tok[0] == "eof" or (tok[0] == "op" and tok[1] == ")"):
            return True
        return tok[0] == "name" and tok[1] in extra_end

    def list_(self) -> Node:
        lineno = self.s.expect("op", "[")[2]
        items: List[Node] = []
        while not self.s.is_op("]"):
            if items:
                self.s.expect("op", ",")
            if self.s.is_op("]"):
                break
            items.append(self.expression())
        self.s.expect("op", "]")
        return Node("list", lineno, items=items)

    def dict_(self) -> Node:
        lineno = self.s.expect("op", "{")[2]
        items: List[Tuple[Node, Node]] = []
        while not self.s.is_op("}"):
            if items:
                self.s.expect("op", ",")
            if self.s.is_op("}"):
                break
            key = self.expression()
            self.s.expect("op", ":")
            items.append((key, self.expression()))
        self.s.expect("op", "}")
        return Node("dict", lineno, items=items)

    def postfix(self, node: Node) -> Node:
        while True:
            if self.s.is_op(".") or self.s.is_op("["):
                node = self.subscript(node)
            elif self.s.is_op("("):
                node = self.call(node)
            else:
                return node

    def filter_expr(self, node: Node) -> Node:
        while True:
            if self.s.is_op("|"):
                node = self.filter(node)
            elif self.s.is_name("is"):
                node = self.test(node)
            elif self.s.is_op("("):
                node = self.call(node)
            else:
                return node

    def subscript(self, node: Node) -> Node:
        tok = self.s.next()
        if tok[1] == ".":
            attr = self.s.next()
            if attr[0] == "name":
                return Node("getattr", tok[2], node=node, attr=attr[1])
            if attr[0] != "integer":
                raise self.s.fail("expected name or number", attr)
            return Node("getitem", tok[2], node=node, arg=Node("const", attr[2], value=attr[1]))
        args: List[Node] = []
        while not self.s.is_op("]"):
            if args:
                self.s.expect("op", ",")
            args.append(self.subscribed())
        self.s.expect("op", "]")
        arg = args[0] if len(args) == 1 else Node("tuple", tok[2], items=args)
        return Node("getitem", tok[2], node=node, arg=arg)

    def subscribed(self) -> Node:
        lineno = self.s.cur[2]
        if self.s.skip_op(":"):
            parts: List[Optional[Node]] = [None]
        else:
            node = self.expression()
            if not self.s.skip_op(":"):
                return node
            parts = [node]
        if self.s.is_op(":"):
            parts.append(None)
        elif not (self.s.is_op("]") or self.s.is_op(",")):
            parts.append(self.expression())
        else:
            parts.append(None)
        if self.s.skip_op(":"):
            parts.append(None if self.s.is_op("]") or self.s.is_op(",") else self.expression())
        else:
            parts.append(None)
        return Node("slice", lineno, start=parts[0], stop=parts[1], step=parts[2])

    def call_args(self) -> Tuple[List[Node], List[Tuple[str, Node]], Optional[Node], Optional[Node]]:
        tok = self.s.expect("op", "(")
        args: List[Node] = []
        kwargs: List[Tuple[str, Node]] = []
        dyn_args = dyn_kwargs = None

        def ensure(ok: bool) -> None:
            if not ok:
                raise self.s.fail("invalid syntax for function call expression", tok)

        require_comma = False
        while not self.s.is_op(")"):
            if require_comma:
                self.s.expect("op", ",")
                if self.s.is_op(")"):
                    break
            if self.s.skip_op("*"):
                ensure(dyn_args is None and dyn_kwargs is None)
                dyn_args = self.expression()
            elif self.s.skip_op("**"):
                ensure(dyn_kwargs is None)
                dyn_kwargs = self.expression()
            elif self.s.cur[0] == "name" and self.s.look()[0] == "op" and self.s.look()[1] == "=":
                ensure(dyn_kwargs is None)
                key = self.s.next()[1]
                self.s.next()
                kwargs.append((key, self.expression()))
            else:
                ensure(dyn_args is None and dyn_kwargs is None and not kwargs)
                args.append(self.expression())
            require_comma = True
        self.s.expect("op", ")")
        return args, kwargs, dyn_args, dyn_kwargs

    def call(self, node: Node) -> Node:
        lineno = self.s.cur[2]
        args, kwargs, dyn_args, dyn_kwargs = self.call_args()
        return Node("call", lineno, node=node, args=args, kwargs=kwargs, dyn_args=dyn_args, dyn_kwargs=dyn_kwargs)

    def _dotted_name(self) -> str:
        name = self.s.expect("name")[1]
        while self.s.skip_op("."):
            name += "." + self.s.expect("name")[1]
        return name

    def filter(self, node: Optional[Node], start_inline: bool = False) -> Optional[Node]:
        while self.s.is_op("|") or start_inline:
            if not start_inline:
                self.s.next()
            lineno = self.s.cur[2]
            name = self._dotted_name()
            args: Any = ([], [], None, None)
            if self.s.is_op("("):
                args = self.call_args()
            node = Node("filter", lineno, node=node, name=name, args=args[0], kwargs=args[1],
                        dyn_args=args[2], dyn_kwargs=args[3])
            start_inline = False
        return node

    def test(self, node: Node) -> Node:
        lineno = self.s.next()[2]
        negated = self.s.skip_name("not")
        name = self._dotted_name()
        args: Any = ([], [], None, None)
        tok = self.s.cur
        if self.s.is_op("("):
            args = self.call_args()
        elif (tok[0] in ("name", "string", "integer", "float") or (tok[0] == "op" and tok[1] in "([{")) \
                and not (tok[0] == "name" and tok[1] in ("else", "or", "and")):
            if tok[0] == "name" and tok[1] == "is":
                raise self.s.fail("You cannot chain multiple tests with is")
            args = ([self.postfix(self.primary())], [], None, None)
        node = Node("test", lineno, node=node, name=name, args=args[0], kwargs=args[1],
                    dyn_args=args[2], dyn_kwargs=args[3])
        return Node("not", lineno, node=node) if negated else node


def parse(source: str) -> List[Node]:
    """The template's body: a list of statement nodes."""
    parser = Parser(source)
    body = parser.subparse(())
    if parser.s.cur[0] != "eof":
        raise parser.s.fail("unexpected tokens after the end of the template")
    return body
