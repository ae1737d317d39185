"""Keeping the lines a rewrite made within the file's own width, as black or ``ruff format`` would
break them.

The width is the file's own: its longest line, at least ruff's and black's default 88 (a file
written to 120 columns is held to 120). Only statements the migration changed are touched, and
only when one of their lines is longer than the width: an assignment, ``return`` or expression
statement, or the condition of an ``if``/``elif``/``while``. Their expression is broken the way
the formatters do it: a conditional expression in parentheses (on one indented line if it fits,
else ``body`` / ``if test`` / ``else orelse`` lines), a call's arguments on one indented line if
they fit, else one per line with a trailing comma, recursively where a part is still too long.
Anything else (a long string, a long operator chain) is left as it is: the rewrite does not
allow it. The result must be the same program: its ``ast`` is compared with the unbroken text's,
and on any difference the unbroken text is kept.
"""

from __future__ import annotations

import ast
from typing import List, Optional, Set

import libcst as cst

DEFAULT_WIDTH = 88  # ruff's and black's line length
STEP = 4  # the indent of a continuation line


def file_width(source: str) -> int:
    """The width a file is written to: its longest line, at least ``DEFAULT_WIDTH``."""
    return max([DEFAULT_WIDTH, *(len(line) for line in source.split("\n"))])


def fit_lines(module: cst.Module, text: str, original: str) -> str:
    """``text`` (the code of ``module``) with the new over-long lines broken within the original's width."""
    width = file_width(original)
    known = set(line.strip() for line in original.split("\n"))
    if not any(len(line) > width and line.strip() not in known for line in text.split("\n")):
        return text
    fitted = module.visit(_Fit(module, width, known))
    if fitted is module:
        return text
    result = fitted.code
    try:
        same = ast.dump(ast.parse(result)) == ast.dump(ast.parse(text))
    except SyntaxError:
        same = False
    return result if same else text


class _Fit(cst.CSTTransformer):
    def __init__(self, module: cst.Module, width: int, known: Set[str]) -> None:
        self.module = module
        self.width = width
        self.known = known
        self.indents: List[int] = [0]

    # -- where we are -----------------------------------------------------------------------------
    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
        indent = node.indent if node.indent is not None else self.module.default_indent
        self.indents.append(self.indents[-1] + len(indent))

    def leave_IndentedBlock(self, original: cst.IndentedBlock, updated: cst.IndentedBlock) -> cst.IndentedBlock:
        self.indents.pop()
        return updated

    def _code(self, node: cst.CSTNode) -> str:
        return self.module.code_for_node(node)

    def _new_and_long(self, line_text: str) -> bool:
        return any(self.indents[-1] + len(line) > self.width for line in line_text.split("\n")) and \
            line_text.strip() not in self.known and not all(part.strip() in self.known for part in line_text.split("\n"))

    # -- statements -------------------------------------------------------------------------------
    def leave_SimpleStatementLine(self, original: cst.SimpleStatementLine,
                                  updated: cst.SimpleStatementLine) -> cst.SimpleStatementLine:
        if len(updated.body) != 1:
            return updated
        small = updated.body[0]
        comment = updated.trailing_whitespace.comment
        tail = len(comment.value) + 2 if comment is not None else 0
        line = self._code(small)
        if not self._new_and_long(line + " " * tail):
            return updated
        if isinstance(small, cst.Assign):
            prefix = "".join(self._code(t.target) + " = " for t in small.targets)
        elif isinstance(small, cst.AnnAssign) and small.value is not None:
            prefix = f"{self._code(small.target)}: {self._code(small.annotation.annotation)} = "
        elif isinstance(small, cst.AugAssign):
            prefix = f"{self._code(small.target)} {small.operator._get_token()} "
        elif isinstance(small, cst.Return) and small.value is not None:
            prefix = "return "
        elif isinstance(small, cst.Expr):
            prefix = ""
        else:
            return updated
        value = self._broken(small.value, len(prefix), tail)
        return updated if value is None else updated.with_changes(body=[small.with_changes(value=value)])

    def leave_If(self, original: cst.If, updated: cst.If) -> cst.If:
        return self._header(updated, "if ")

    def leave_While(self, original: cst.While, updated: cst.While) -> cst.While:
        return self._header(updated, "while ")

    def _header(self, node, keyword: str):
        test = self._code(node.test)
        if not self._new_and_long(f"{keyword}{test}:"):
            return node
        value = self._broken(node.test, len(keyword), 1)
        return node if value is None else node.with_changes(test=value)

    def _broken(self, expr: cst.BaseExpression, column: int, tail: int) -> Optional[cst.BaseExpression]:
        text = _Breaker(self.module, self.width - self.indents[-1]).expression(expr, 0, column, tail)
        if text is None:
            return None
        try:
            return cst.parse_expression(text)
        except cst.ParserSyntaxError:
            return None


class _Breaker:
    """The text of an expression broken over lines, relative to its statement's indentation."""

    def __init__(self, module: cst.Module, width: int) -> None:
        self.module = module
        self.width = width

    def _flat(self, node: cst.CSTNode) -> str:
        return self.module.code_for_node(node)

    def _fits(self, text: str, column: int, tail: int) -> bool:
        lines = text.split("\n")
        if len(lines) == 1:
            return column + len(text) + tail <= self.width
        return column + len(lines[0]) <= self.width and all(len(line) <= self.width for line in lines[1:-1]) \
            and len(lines[-1]) + tail <= self.width

    def any(self, node: cst.BaseExpression, indent: int, column: int, tail: int) -> str:
        """The expression's text: as it is when it fits, else broken where it can be."""
        flat = self._flat(node)
        if "\n" not in flat and self._fits(flat, column, tail):
            return flat
        return self.expression(node, indent, column, tail) or flat

    def expression(self, node: cst.BaseExpression, indent: int, column: int, tail: int) -> Optional[str]:
        bare = node.with_changes(lpar=[], rpar=[]) if getattr(node, "lpar", None) else node
        if isinstance(bare, cst.IfExp):
            return self._conditional(bare, indent)
        if isinstance(bare, cst.Call):
            arguments = "(" + ", ".join(self._argument(arg, None, 0) for arg in bare.args) + ")"
            func = self._flat(bare.func)
            if not self._fits(func + "(", column, 0) or not bare.args:  # (a if c else b).flatten(3)
                inner = self.expression(bare.func, indent, column, tail + len(arguments))
                return None if inner is None else inner + arguments
            return self._call(bare, indent, column, tail)
        if isinstance(bare, cst.Subscript):  # f(...)[0]
            index = self._flat(bare).removeprefix(self._flat(bare.value))
            inner = self.expression(bare.value, indent, column, tail + len(index))
            return None if inner is None else inner + index
        if isinstance(bare, cst.BooleanOperation):
            return self._boolean(bare, indent)
        if isinstance(bare, cst.Attribute):  # (a if c else b).flatten(3), f(...).float()
            rest = "." + bare.attr.value
            inner = self.expression(bare.value, indent, column, tail + len(rest))
            return None if inner is None else inner + rest
        return None

    def _conditional(self, node: cst.IfExp, indent: int) -> str:
        inner = indent + STEP
        pad, end = " " * inner, " " * indent
        flat = f"{self._flat(node.body)} if {self._flat(node.test)} else {self._flat(node.orelse)}"
        if "\n" not in flat and self._fits(flat, inner, 0):
            return f"(\n{pad}{flat}\n{end})"
        body = self.any(node.body, inner, inner, 0)
        test = self.any(node.test, inner, inner + 3, 0)
        orelse = self.any(node.orelse, inner, inner + 5, 0)
        return f"(\n{pad}{body}\n{pad}if {test}\n{pad}else {orelse}\n{end})"

    def _boolean(self, node: cst.BooleanOperation, indent: int) -> str:
        """``a and not b`` as black breaks it: in parentheses, one operand a line."""
        operands, operators = [], []
        while isinstance(node, cst.BooleanOperation) and not node.lpar:
            operands.append(node.right)
            operators.append(node.operator)
            node = node.left
        operands.append(node)
        operands.reverse()
        operators.reverse()
        inner = indent + STEP
        pad, end = " " * inner, " " * indent
        lines = [pad + self.any(operands[0], inner, inner, 0)]
        for operator, operand in zip(operators, operands[1:]):
            word = "and " if isinstance(operator, cst.And) else "or "
            lines.append(pad + word + self.any(operand, inner, inner + len(word), 0))
        return "(\n" + "\n".join(lines) + f"\n{end})"

    def _call(self, node: cst.Call, indent: int, column: int, tail: int) -> str:
        inner = indent + STEP
        pad, end = " " * inner, " " * indent
        func = self._flat(node.func)
        args = [self._argument(arg, None, inner) for arg in node.args]
        together = ", ".join(args)
        if "\n" not in together and self._fits(together, inner, 0):
            return f"{func}(\n{pad}{together}\n{end})"
        broken = [self._argument(arg, inner, inner) for arg in node.args]
        return f"{func}(\n" + "".join(f"{pad}{arg},\n" for arg in broken) + f"{end})"

    def _argument(self, arg: cst.Arg, indent: Optional[int], column: int) -> str:
        head = f"{arg.keyword.value}=" if arg.keyword is not None else arg.star
        if indent is None:
            return head + self._flat(arg.value)
        return head + self.any(arg.value, indent, column + len(head), 1)
