"""Issue 21 (smaller): the terminal and the reports give the same parity counts. "gradients" are the
loss and the parameters' gradients, "after step" the outputs after the optimizer step, counted apart
in the console's table, on report.html and in report.md, and so are the outputs after the state changes (the console once folded the after-step
output into the gradients: 23/23 there, 22/22 on the page)."""

from rich.console import Console

from npu_migrate.migrate.outputs import parity_result, report_html
from npu_migrate.migrate.parity.criteria import default_criteria
from npu_migrate.migrate.parity.metrics import Metrics
from npu_migrate.migrate.parity.report import CaseResult, ParityReport, TensorResult, render


def test_the_console_and_the_pages_count_the_same_tensors():
    ok = Metrics(cosine=1.0, max_abs_err=1e-7)
    tensors = [TensorResult("output", "logits", ok), TensorResult("loss", "loss", ok)]
    tensors += [TensorResult("grad", f"w{i}", ok) for i in range(21)]
    tensors += [TensorResult("after_step", "logits", ok)]
    tensors += [TensorResult("after_change", f"{change}/logits", ok) for change in ("tie", "set")]
    case = CaseResult("train-step", "float32", next(iter(default_criteria().values())), tensors=tensors)
    report = ParityReport("spec.yaml", "orig", "orig-npu", "cpu", [case])
    console = Console(width=400, record=True)
    console.print(render(report))
    text = console.export_text()
    (row,) = parity_result.rows(report.to_json())
    assert row["gradients"].startswith("22/22 ok") and row["after step"].startswith("1/1 ok")
    assert row["state changes"].startswith("2/2 ok")
    assert "22/22 ok" in text and "23/23" not in text and "after step" in text and "state changes" in text
    page = report_html.render({"summary": {"files_scanned": 0, "files_changed": 0, "files_unchanged": 0,
                                           "files_skipped": 0, "files_errored": 0, "files_other": 0,
                                           "sites_rewritten": 0, "sites_reported": 0, "sites_suppressed": 0,
                                           "rewrites_by_safety": {"safe": 0, "numerics-changing": 0}, "by_code": {}},
                               "files": [], "findings": []}, (), report.to_json())
    assert "<th>after step</th>" in page and "<th>state changes</th>" in page and "2/2 ok" in page
    assert "22/22 ok" in page and "23/23" not in page
