"""NPU210 beyond its fixtures: the migrated profiler runs on the emulated NPU and trains exactly as
the original, and the rule's picture of torch_npu's profiler (keywords, methods) is the emulated
one's, which follows the real API (kernels/profiler.py)."""

import inspect
import runpy
from pathlib import Path

import pytest
import torch

from npu_migrate import kernels
from npu_migrate.kernels import profiler
from npu_migrate.migrate.rules._profiler_call import HANDLER_KEYWORDS, PROFILE_KEYWORDS, PROFILE_METHODS, SCHEDULE_KEYWORDS

CASE = Path(__file__).parents[2] / "fixtures" / "rules" / "NPU210_profiler"


def _run(path: Path, tmp: Path):
    functions = runpy.run_path(str(path))
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    batches = [(torch.randn(5, 4), torch.randint(0, 3, (5,))) for _ in range(6)]
    losses = functions["profile_training"](model, batches, str(tmp / "log"))
    out = functions["profile_inference"](model, batches[0][0], str(tmp / "inference.json"))
    return losses, out


@pytest.mark.filterwarnings("ignore:CUDA is not available")
def test_the_migrated_profiler_runs_on_the_emulated_npu_and_trains_the_same(tmp_path):
    losses, out = _run(CASE / "input.py", tmp_path / "cuda")
    with kernels.emulate() as active:
        if not active:
            pytest.skip("a real torch_npu is installed; the emulator stays off")
        npu_losses, npu_out = _run(CASE / "expected.py", tmp_path / "npu")
    assert npu_losses == losses and torch.equal(npu_out, out)
    assert list((tmp_path / "npu" / "log").glob("*_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json"))
    assert (tmp_path / "npu" / "inference.json").is_file() and (tmp_path / "npu" / "inference.json.stacks").is_file()


def test_the_rule_knows_torch_npus_profile_as_the_emulator_has_it():
    assert set(inspect.signature(profiler.profile).parameters) == PROFILE_KEYWORDS
    methods = {name for name, _ in inspect.getmembers(profiler.profile, inspect.isfunction) if not name.startswith("_")}
    assert methods == PROFILE_METHODS - {"__enter__", "__exit__"}
    assert SCHEDULE_KEYWORDS <= set(inspect.signature(profiler.schedule).parameters)
    assert HANDLER_KEYWORDS <= set(inspect.signature(profiler.tensorboard_trace_handler).parameters)
