import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from npu_migrate.migrate.positions import positions

SOURCE = '''import torch  # comment


class Model(torch.nn.Module):
    def forward(self, x):
        """A docstring
        spanning lines."""
        y = (x.cuda() +
             torch.cuda.synchronize())  # trailing
        z = [torch.float64, {"k": x.double()}]
        return y if z else\\
            torch.zeros(1)
'''


def test_positions_agree_with_libcst_position_provider():
    module = cst.parse_module(SOURCE)
    nodes = []

    class Collect(cst.CSTVisitor):
        def on_visit(self, node):
            if isinstance(node, (cst.Call, cst.Attribute, cst.Name, cst.SimpleString, cst.Dict)):
                nodes.append(node)
            return True

    module.visit(Collect())
    reference = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    ours = positions(module, nodes)
    assert len(nodes) > 20
    for node in nodes:
        start = reference[node].start
        assert ours[id(node)] == (start.line, start.column), module.code_for_node(node)


def test_no_nodes_no_work():
    assert positions(cst.parse_module("x = 1\n"), []) == {}
