"""Overlap detection with sorted intervals: the same verdicts (and the same named site) as comparing
every pair, on random edits of random trees, and linear-logarithmic on 10,000 sites of one file."""

import random

import libcst as cst
import libcst.matchers as m

from npu_migrate.migrate import overlaps as overlaps_module
from npu_migrate.migrate.diagnostics import DiagnosticCode
from npu_migrate.migrate.edits import Code, Guarded, Replace, Site, Splice
from npu_migrate.migrate.findings import Finding
from npu_migrate.migrate.overlaps import overlaps, overlaps_pairwise
from npu_migrate.migrate.rules.base import Rule
from npu_migrate.migrate.tree import TreeIndex
from npu_migrate.opmap import OpTable
from tests import snippets
import pytest


def _source(rng: random.Random) -> str:
    def expression(depth):
        if depth == 0 or rng.random() < 0.3:
            return rng.choice(["a", "b", "c", "x.y", "f(a)", "k"])
        kind = rng.randrange(3)
        if kind == 0:
            return f"({expression(depth - 1)} + {expression(depth - 1)})"
        if kind == 1:
            return f"g({expression(depth - 1)}, {expression(depth - 1)})"
        return f"{expression(depth - 1)}.h()"

    def block(indent, depth):
        lines = []
        for _ in range(rng.randint(1, 5)):
            if depth and rng.random() < 0.3:
                lines.append(f"{indent}if {expression(1)}:")
                lines.extend(block(indent + "    ", depth - 1))
            else:
                lines.append(f"{indent}v = {expression(3)}")
        return lines

    text = []
    for i in range(rng.randint(1, 3)):
        text.append(f"def f{i}(a):")
        text.extend(block("    ", 2))
    return "\n".join(text) + "\n"


def _random_sites(rng: random.Random, module: cst.Module, tree: TreeIndex, count: int):
    nodes, _ = tree.preorder()
    expressions = [n for n in nodes if isinstance(n, cst.BaseExpression)]
    blocks = [n for n in nodes if isinstance(n, (cst.IndentedBlock, cst.Module)) and n.body]
    statements = [n for n in nodes if isinstance(n, cst.BaseStatement)]

    def holes_below(node, share):
        below = tree.subtree(node)[1:]
        return rng.sample(below, min(len(below), int(len(below) * share)))

    def a_code(keep):
        return Code("new", tuple((f"h{i}", n) for i, n in enumerate(keep)))

    sites = []
    for i in range(count):
        edits = []
        for _ in range(rng.choice([1, 1, 2])):
            kind = rng.random()
            if kind < 0.6:
                node = rng.choice(expressions if kind < 0.45 else statements if kind < 0.55 else blocks)
                keep = holes_below(node, rng.choice([0, 0.1, 0.5]))
                if rng.random() < 0.25:
                    keep.append(node)  # a wrapper
                edits.append(Replace(node, a_code(keep)))
            else:
                block = rng.choice(blocks)
                start = rng.randrange(len(block.body) + 1)
                end = rng.randrange(start, len(block.body) + 1)
                if kind < 0.85:
                    keep = [s for s in block.body[start:end] if rng.random() < 0.5]
                    keep += [h for s in block.body[start:end] for h in holes_below(s, 0.05)]
                    edits.append(Splice(block, start, end, (a_code(keep),)))
                else:
                    edits.append(Guarded(block, start, end, a_code([]), (a_code([]),)))
        sites.append(Site(module, Finding("NPU900", "m", "rewritten", line=i + 1, col=0), tuple(edits)))
    return sites


@pytest.mark.slow
def test_the_intervals_agree_with_every_pair_compared():
    rng = random.Random(25)
    dropped_some = kept_some = 0
    for _ in range(300):
        module = cst.parse_module(_source(rng))
        tree = TreeIndex(module)
        sites = _random_sites(rng, module, tree, rng.randint(2, 40))
        fast, slow = overlaps(sites, tree), overlaps_pairwise(sites, tree)
        assert fast == slow
        dropped_some += bool(fast)
        kept_some += len(fast) < len(sites)
    assert dropped_some > 200 and kept_some == 300  # the cases exercise both verdicts


class RenameCuda(Rule):
    declarations = (DiagnosticCode("NPU900", "t-rename", "x.cuda() -> x.npu()", rewrites=True),)
    triggers = (b"cuda",)

    def visit_Call(self, node):
        if m.matches(node.func, m.Attribute(attr=m.Name("cuda"))):
            self.replace(node.func.attr, cst.Name("npu"), "renamed", target="Tensor.npu")


class ProductDropped(Rule):
    declarations = (DiagnosticCode("NPU902", "t-drop", "drop", rewrites=True),)
    triggers = (b"*",)

    def visit_BinaryOperation(self, node):
        if isinstance(node.operator, cst.Multiply):
            self.replace(node, Code("zero()"), "dropped", target="zero")


@pytest.mark.slow
def test_ten_thousand_sites_in_one_file(monkeypatch):
    """5,000 lines, each with a product rebuilt without its operand (which holds a rename): 10,000
    sites, every rename dropped naming its own line's product; the pair rule is consulted only for
    edits of one node (never pair by pair), so the cost grows as n log n."""
    calls = []
    pair_rule = overlaps_module.loses
    monkeypatch.setattr(overlaps_module, "loses", lambda *args: calls.append(1) or pair_rule(*args))
    lines = 5000
    source = "".join(f"y{i} = x{i}.cuda() * 2\n" for i in range(lines))
    result = snippets.migrate(source, "big.py", rules=[RenameCuda, ProductDropped], table=OpTable([]), status="changed")
    assert result.migrated == "".join(f"y{i} = zero()\n" for i in range(lines))
    dropped = [f for f in result.findings if f.code == "NPU006"]
    assert len(result.findings) == 2 * lines and len(dropped) == lines
    assert all(f.message.startswith(f"NPU900 rewrite not applied: it overlaps the rewrite of NPU902 at {f.line}:")
               for f in dropped)
    assert len(calls) <= 2 * lines
