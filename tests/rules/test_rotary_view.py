"""The view additions the rotary forms of issue 20 rest on, read directly: helpers inlined when they
branch with ``if/else`` returns or are called with keywords (an omitted literal default taken as
written), why a helper of the file is not inlined (``View.unread``), ``dim=t.ndim - 1`` read as the
last dim, and halves written as a (2, D/2) split of the last dim."""

from __future__ import annotations

import libcst as cst
import pytest
from libcst.helpers import get_full_name_for_node

from npu_migrate.migrate.view.build import View
from npu_migrate.migrate.view.ops import Op
from npu_migrate.migrate.view.scope import Scope


def torch_names(node: cst.CSTNode):
    """``torch.cat`` and the like qualified as written (the snippets import torch plainly)."""
    name = get_full_name_for_node(node)
    return name if name is not None and name.split(".")[0] == "torch" else None


def view_of(source: str, name: str = "f") -> View:
    module = cst.parse_module(source)
    func = next(s for s in module.body if isinstance(s, cst.FunctionDef) and s.name.value == name)
    return View(func, Scope.of(module, torch_names))


def test_an_if_else_of_returns_is_one_value_chosen_by_its_test():
    view = view_of('''
def pick(x, flag=False):
    if not flag:
        return x.chunk(2, dim=-1)[0]
    else:
        return x[..., ::2]

def f(x, flag):
    return pick(x, flag)
''')
    result = view.result()
    assert result.op == Op.PHI and result["then"].name == "first_half" and result["else"].name == "even"
    assert result["test"].input is view.env["flag"]  # the caller's flag, under the helper's `not`


@pytest.mark.parametrize("call, part", [("pick(x, flag=True)", "even"), ("pick(x)", "first_half"),
                                        ("pick(x, False)", "first_half")])
def test_keywords_and_omitted_defaults_are_bound_to_the_helper_parameters(call, part):
    view = view_of(f'''
def pick(x, flag=False):
    if flag:
        return x[..., ::2]
    return x.chunk(2, dim=-1)[0]

def f(x):
    return {call}
''')
    result = view.result()
    assert result.op == Op.PHI and result["test"].op == Op.CONST  # the flag as the call gives it
    taken = result["then"] if result["test"].number else result["else"]
    assert taken.name == part


@pytest.mark.parametrize("call, why", [
    ("pick(x, mode=1)", "keyword `mode` that names none of its parameters"),
    ("pick(*x)", "unpacked arguments"),
    ("pick(x, 1, 2)", "more arguments than it has parameters"),
    ("looped(x)", "does not return one value on a straight path"),
])
def test_a_helper_that_is_not_inlined_says_why(call, why):
    view = view_of(f'''
def pick(x, flag=False):
    return x

def looped(x):
    for _ in range(2):
        return x
    return x

def f(x):
    return {call}
''')
    result = view.result()
    assert result.op == Op.CALL and why in view.unread[id(result.node)]


@pytest.mark.parametrize("dim, last", [("x1.ndim - 1", True), ("x.dim() - 1", True), ("y.ndim - 1", False),
                                       ("x1.ndim - 2", False)])
def test_the_rank_minus_one_of_a_piece_is_the_last_dim(dim, last):
    view = view_of(f'''
def f(x, y):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim={dim})
''')
    assert (view.result()["dim"].number == -1) is last


@pytest.mark.parametrize("split, halves", [
    ("x.view(B, nh, T, 2, hs // 2).unbind(-2)", True),
    ("x.view(*x.shape[:-1], 2, -1).unbind(-2)", True),
    ("x.unflatten(-1, (2, -1)).unbind(-2)", True),
    ("x.view(nh, B, T, 2, hs // 2).unbind(-2)", False),  # other leading sizes: not x's rows
    ("x.view(B, nh, T, hs // 2, 2).unbind(-2)", False),  # pairs, not halves
    ("x.view(B, nh, T, 2, hs // 2).unbind(-1)", False),
])
def test_two_rows_of_the_last_dim_are_its_halves(split, halves):
    view = view_of(f'''
def f(x):
    B, nh, T, hs = x.size()
    x1, x2 = {split}
    return x1, x2
''')
    first, second = view.result().items
    assert (first.op == Op.CHANNELS and first.name == "first_half" and second.name == "second_half") is halves


def test_a_split_at_the_size_a_view_gave_the_last_dim_is_a_half():
    view = view_of('''
def f(self, h):
    b, s, _ = h.size()
    h = h.view(b, s, self.n, self.d).transpose(0, 1)
    return h[..., : self.d // 2], h[..., self.d // 2 :], h[..., : self.n // 2]
''')
    first, second, other = view.result().items
    assert (first.name, second.name) == ("first_half", "second_half") and other.op != Op.CHANNELS


def test_a_branch_that_writes_state_is_not_read_as_a_choice_of_values():
    """levit's cached biases: the else branch fills a cache, so the helper stays a call (as before)."""
    view = view_of('''
def biases(self, device):
    if self.training:
        return self.table[:, self.index]
    else:
        key = str(device)
        self.cache[key] = self.table[:, self.index]
        return self.cache[key]

def f(self, device):
    return biases(self, device)
''')
    result = view.result()
    assert result.op == Op.CALL and "straight path" in view.unread[id(result.node)]
