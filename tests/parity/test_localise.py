import torch

from npu_migrate.migrate.parity.criteria import default_criteria
from npu_migrate.migrate.parity.localise import ModuleRecorder, first_divergent

CRITERIA = default_criteria()["float32"]


class Pair(torch.nn.Module):
    """Returns a tuple; called twice per forward by its parent."""

    def __init__(self, bias=0.0):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.bias = bias

    def forward(self, x):
        y = self.lin(x)
        return y + self.bias, y


class Net(torch.nn.Module):
    def __init__(self, bias=0.0):
        super().__init__()
        self.pair = Pair(bias)
        self.head = torch.nn.Linear(4, 2)

    def forward(self, x):
        a, _ = self.pair(x)
        b, _ = self.pair(a)  # the second call of the same module
        return self.head(b)


def record(model, x):
    recorder = ModuleRecorder(model)
    with torch.no_grad():
        model(x)
    recorder.remove()
    return recorder.calls


def test_names_innermost_module_whose_inputs_agree():
    torch.manual_seed(0)
    good = Net()
    bad = Net(bias=0.5)
    bad.load_state_dict(good.state_dict())
    x = torch.randn(3, 4)
    found = first_divergent(record(good, x), record(bad, x), CRITERIA)
    d = found.divergent
    assert (d.module, d.call, d.inputs_agree) == ("pair", 0, True)  # not pair.lin, not the 2nd call
    assert [(n.module, n.call) for n in found.neighbours] == [("pair.lin", 0), ("pair.lin", 1), ("pair", 1)]


def test_no_divergence_gives_none():
    torch.manual_seed(0)
    net = Net()
    x = torch.randn(3, 4)
    assert first_divergent(record(net, x), record(net, x), CRITERIA) is None
