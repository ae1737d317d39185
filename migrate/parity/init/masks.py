"""How a forward takes its padding mask, for the ``-padded`` case (``parity.init.harness.Padded``).

A forward argument named as a mask (``attention_mask``, ``mask``, ``padding_mask``,
``key_padding_mask``, ``attn_mask``) is a padding mask over the positions of the model's sequence
input. Its style is read from how the forward's body uses it, else from its name:

- ``additive``: added to something (``scores + attention_mask``): 0 where kept, the dtype's
  minimum where padded, shaped ``[B, 1, 1, N]`` to broadcast over heads and queries;
- ``bool``: negated (``~mask``), made boolean (``mask.bool()``) or a mask named ``mask`` /
  ``padding_mask`` (the convention of most research code): True where kept;
- ``pad``: a boolean that marks the padded positions: filled where True (``x.masked_fill(mask, v)``)
  or named ``key_padding_mask`` (``nn.MultiheadAttention``'s convention);
- ``square``: a boolean ``[B, N, N]`` mask of the keys each query attends to (True where it does),
  as the forward's docstring describes it (``[b x s x s]``, torchtune's convention): causal, the
  padded keys masked, every query attending at least to itself;
- ``keep``: anything else, e.g. Hugging Face's ``attention_mask`` (``(1.0 - mask) * min``):
  int64, 1 where kept, 0 where padded.
"""

from __future__ import annotations

from typing import Optional

import re

import libcst as cst
import libcst.matchers as m

from .source import Function

MASKS = ("attention_mask", "mask", "padding_mask", "key_padding_mask", "attn_mask")
STYLES = ("keep", "bool", "pad", "additive", "square")
# a query-by-key shape in a docstring: [b x s x s], (batch, seq_len, seq_len)
_SQUARE = re.compile(r"\b(s|seq_len|seq|n)\s*(x|,|\*)\s*\1\b")
_DESCRIBED = 600  # characters of the docstring after the argument's name that describe it
_BY_NAME = {"mask": "bool", "padding_mask": "bool", "key_padding_mask": "pad"}


class _Use(cst.CSTVisitor):
    def __init__(self, name: str):
        self.name = m.Name(name)
        self.style: Optional[str] = None

    def _found(self, style: str) -> None:
        if self.style is None:
            self.style = style

    def visit_UnaryOperation(self, node: cst.UnaryOperation) -> None:
        if m.matches(node, m.UnaryOperation(operator=m.BitInvert(), expression=self.name)):
            self._found("bool")

    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        if m.matches(node.operator, m.Add()) and (m.matches(node.left, self.name) or m.matches(node.right, self.name)):
            self._found("additive")

    def visit_Call(self, node: cst.Call) -> None:
        if m.matches(node.func, m.Attribute(value=self.name, attr=m.Name("bool") | m.Name("logical_not"))):
            self._found("bool")
        elif m.matches(node.func, m.Attribute(attr=m.Name("masked_fill") | m.Name("masked_fill_"))) and node.args \
                and m.matches(node.args[0].value, self.name):
            self._found("pad")


def mask_style(forward: Function, name: str) -> str:
    """The style (``STYLES``) in which ``forward`` takes the mask argument ``name``."""
    docstring = forward.node.get_docstring() or ""
    described = re.search(rf"\b{re.escape(name)}\b", docstring)
    if described and _SQUARE.search(docstring[described.end(): described.end() + _DESCRIBED]):
        return "square"
    use = _Use(name)
    forward.node.body.visit(use)
    return use.style or _BY_NAME.get(name.lower(), "keep")
