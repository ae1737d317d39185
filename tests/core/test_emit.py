"""The one emitter: how a written match binds its outputs, and that the fused rules decide on a
refused region by its kind and name, never by the wording of its reason."""

from pathlib import Path

import pytest

from npu_migrate.migrate import defuse
from npu_migrate.migrate.refusal import Refusal, RefusalKind, blocked
from npu_migrate.migrate.view.emit import Written
from npu_migrate.opmap import Fallback
from tests import snippets

FIXTURES = Path(__file__).parents[2] / "fixtures" / "rules"
FUSED = sorted(p for p in FIXTURES.iterdir() if p.name.startswith("NPU3") and (p / "expected.py").exists())


@pytest.mark.parametrize("outputs, returned, line", [
    ((), True, "return f(x)\n"),
    (("y",), False, "y = f(x)\n"),
    (("y", "s"), False, "y, s = f(x)\n"),
    (("y", ""), False, "y = f(x)[0]\n"),  # npu_add_rms_norm with the sum not kept
    (("w", "i", ""), False, "w, i, _ = f(x)\n"),  # a router whose scores are not read
    (("", "i", "p"), False, "_, i, p = f(x)\n"),
])
def test_a_written_match_binds_the_results_it_keeps(outputs, returned, line):
    written = Written("ok(x)", "f(x)", "message", outputs, after=("i = i.long()\n",))
    assert written.binding(returned) == line
    assert [c.text for c in written.fused(returned)] == [line, "i = i.long()\n"]


def test_a_blocked_site_keeps_its_own_plan_and_a_refusal_without_one_takes_the_default():
    own, default = Fallback("manual", "own plan"), Fallback("manual", "default plan")
    site = blocked(None, "the scores are soft-capped", own)
    assert site.kind is RefusalKind.FORM and site.planned(default).fallback is own
    moved = Refusal(RefusalKind.OPERAND, "q is not a plain name").planned(default)
    assert (moved, moved.kind, moved.fallback) == ("q is not a plain name", RefusalKind.OPERAND, default)


@pytest.mark.slow
def test_rewording_every_region_refusal_changes_no_rewrite(monkeypatch):
    """Hoisting a binding (RMSNorm's ``input_dtype``), the attention probabilities' flag and the
    router's scores kernel all react to a name read after the region: with every reason reworded,
    each fused fixture still migrates to its expected text."""
    seen = []

    def reworded(kind, reason, name=None, **fields):
        seen.append(kind)
        return Refusal(kind, f"reworded {kind.name.lower()}", name, **fields)

    monkeypatch.setattr(defuse, "Refusal", reworded)
    different = []
    for case in FUSED:
        engine = snippets.engine([case.name.split("_")[0]])
        result = snippets.migrate((case / "input.py").read_bytes(), "input.py", using=engine)
        if result.migrated != (case / "expected.py").read_text():
            different.append(case.name)
    assert RefusalKind.READ_AFTER_ORIGINAL_ONLY in seen  # the rewording was in force where decisions are made
    assert different == []
