import pytest
import libcst as cst
import libcst.matchers as m

from npu_migrate.migrate.diagnostics import DiagnosticCode
from npu_migrate.migrate.edits import ImportSpec, template as code
from npu_migrate.migrate.rules.base import Rule
from npu_migrate.opmap import Fallback, OpRecord, OpTable
from tests import snippets

TABLE = OpTable([OpRecord("torch.float64", "unsupported", code="NPU901", summary="no float64 on NPU",
                          fallback=Fallback("manual", "use float32"))])


class RenameCuda(Rule):
    declarations = (DiagnosticCode("NPU900", "test-rename", "x.cuda() -> x.npu()", rewrites=True),)
    triggers = (b".cuda(",)

    def visit_Call(self, node):
        if m.matches(node.func, m.Attribute(attr=m.Name("cuda"))):
            self.replace(node.func.attr, cst.Name("npu"), "renamed", target="Tensor.npu", imports=[ImportSpec("torch_npu")])


class ReportFloat64(Rule):
    declarations = (DiagnosticCode("NPU901", "test-report", "report float64"),)
    triggers = (b"float64",)

    def visit_Attribute(self, node):
        api, record = self.lookup(node)
        if record is not None:
            self.report_record(node, record, api)


class WrapCalls(Rule):
    """Wraps every call to ``wrap`` in ``outer(...)``: composes with fixes inside the call."""

    declarations = (DiagnosticCode("NPU902", "test-wrap", "wrap", rewrites=True),)
    triggers = (b"wrap(",)

    def visit_Call(self, node):
        if m.matches(node.func, m.Name("wrap")):
            self.replace(node, code("outer({orig})", orig=node), "wrapped", target="outer", helpers=["npu_glue"])


class Crash(Rule):
    declarations = (DiagnosticCode("NPU903", "test-crash", "crashes"),)
    triggers = (b"boom",)

    def visit_Name(self, node):
        if node.value == "boom":
            raise ValueError("kaboom")


def engine(*rules, enabled=None):
    return snippets.engine(rules=rules, enabled=enabled, table=TABLE)


def test_rewrites_keep_comments_and_add_the_import():
    src = b"import torch\n\n# keep me\ny = x.cuda()  # and me\n"
    result = engine(RenameCuda).migrate("m.py", src)
    assert result.status == "changed"
    assert result.migrated == "import torch\nimport torch_npu  # noqa: F401\n\n# keep me\ny = x.npu()  # and me\n"
    (finding,) = result.findings
    assert (finding.line, finding.col, finding.action, finding.target) == (4, 6, "rewritten", "Tensor.npu")


def test_reported_site_carries_the_record_fallback_and_position():
    result = engine(ReportFloat64).migrate("m.py", b"import torch as T\n\nx = T.zeros(1, dtype=T.float64)\n")
    assert result.status == "unchanged"
    (finding,) = result.findings
    assert (finding.code, finding.api, finding.line, finding.col) == ("NPU901", "torch.float64", 3, 21)
    assert finding.fallback.plan == "manual"


def test_nested_fixes_compose_and_helpers_are_imported():
    result = engine(RenameCuda, WrapCalls).migrate("pkg/m.py", b"y = wrap(x.cuda())\n")
    assert "y = outer(wrap(x.npu()))" in result.migrated
    assert result.helpers == ["npu_glue"]
    # the helper is imported so that it resolves in any layout (tests/core/test_helper_import.py)
    assert "try:\n    from .npu_glue import npu_glue\nexcept ImportError:" in result.migrated
    assert "\n    import npu_glue\n" in result.migrated


def test_prefilter_skips_files_no_rule_can_touch():
    assert engine(RenameCuda).migrate("m.py", b"import os\n").status == "skipped"


def test_bad_files_become_error_results():
    bad_syntax = engine(RenameCuda).migrate("a.py", b"x.cuda(\n")
    assert bad_syntax.status == "error" and bad_syntax.error.startswith("a.py:") and "NPU001" in bad_syntax.error
    latin1 = engine(RenameCuda).migrate("b.py", "x.cuda()  # caf\xe9\n".encode("latin-1"))
    assert latin1.status == "error" and "NPU002" in latin1.error and "UTF-8" in latin1.error
    crash = engine(Crash).migrate("c.py", b"boom = 1\n")
    assert crash.status == "error" and "Crash (NPU903) crashed: ValueError: kaboom" in crash.error


def test_disabled_codes_neither_report_nor_rewrite():
    result = engine(RenameCuda, ReportFloat64, enabled=lambda code: code != "NPU900").migrate(
        "m.py", b"import torch\nx.cuda(torch.float64)\n")
    assert result.status == "unchanged"
    assert [f.code for f in result.findings] == ["NPU901"]


# -- issue 25 item 6: a BOM and every line-ending style kept byte for byte outside rewritten lines ------
LINES = ["import torch", "", "# a comment", "x = torch.zeros(3).cuda()", "def f(t):", "    return t.cuda()", "y = 1"]
ENDINGS = {"lf": ["\n"], "crlf": ["\r\n"], "cr": ["\r"], "mixed": ["\n", "\r\n", "\r", "\r\n", "\n", "\r", "\n"]}


def _styled(ending: str, last: bool, bom: bool) -> bytes:
    ends = ENDINGS[ending] * len(LINES)
    text = "".join(line + end for line, end in zip(LINES, ends))
    if not last:
        text = text[:-len(ends[len(LINES) - 1])]
    return ("\ufeff" if bom else "").encode() + text.encode()


@pytest.mark.parametrize("bom", [False, True])
@pytest.mark.parametrize("last", [True, False])
@pytest.mark.parametrize("ending", sorted(ENDINGS))
def test_bom_and_line_endings_survive_byte_for_byte(ending, last, bom):
    data = _styled(ending, last, bom)
    result = engine(RenameCuda).migrate("m.py", data)
    assert result.status == "changed"
    out = result.migrated.encode("utf-8")
    assert out.startswith(b"\xef\xbb\xbf") is bom
    # the one added line (the import) sits after the first line, ending like the file's first line
    first_end = ENDINGS[ending][0].encode()
    head = (b"\xef\xbb\xbf" if bom else b"") + b"import torch" + first_end
    assert out == head + b"import torch_npu  # noqa: F401" + first_end + data[len(head):].replace(b".cuda()", b".npu()")

