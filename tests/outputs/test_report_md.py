"""Issue 21 item 4: report.md is a pull-request description. Sites that share one piece of advice
are grouped under it, the page stays under 60,000 characters on a large repository (saying where
every site is), and it shows the parity result, the new files and the new dependencies."""

from npu_migrate.migrate.outputs import report_md
from npu_migrate.migrate.outputs.report_json import summarize
from tests.outputs.test_report_html import FAILED_PARITY


def site(path, line, code="NPU303", action="reported", message="attention the kernel cannot express", detail="d"):
    return {"code": code, "path": path, "line": line, "col": 5, "cell": None, "message": message,
            "api": "attention", "action": action, "safety": "safe" if action == "rewritten" else None,
            "target": "torch.npu.x" if action == "rewritten" else None,
            "fallback": {"plan": "manual", "detail": detail} if action == "reported" else None, "snippet": "x"}


def report(findings, files=None, **extra) -> dict:
    files = files or [{"path": p, "status": "changed", "error": None} for p in sorted({f["path"] for f in findings})]
    return {"schema_version": 5, "summary": summarize(files, findings, 0), "files": files, "findings": findings,
            "excluded": [], "written": None, "new_files": [], "updated_files": [], "new_dependencies": [], **extra}


def test_sites_sharing_an_advice_are_listed_under_it_once():
    long_advice = "Use the unfused code path; " * 20
    findings = [site(f"m{i}.py", 10 + i, detail=long_advice) for i in range(30)]
    text = report_md.render(report(findings))
    assert text.count(long_advice.strip()) == 1
    assert "### NPU303 (30 sites) — plan: manual" in text
    assert "- `m7.py:17:5`" in text


def test_a_large_repository_stays_under_the_limit_and_says_where_every_site_is():
    findings = []
    for i in range(400):  # 400 files, 25 rewrites each, 5 sites needing attention under 15 advices
        findings += [site(f"models/model_{i}/modeling.py", line, "NPU203", "rewritten", f".cuda() → .npu() #{line % 3}")
                     for line in range(1, 26)]
        findings += [site(f"models/model_{i}/modeling.py", 100 + j, detail=f"advice {(i + j) % 15} " + "x" * 300)
                     for j in range(5)]
    text = report_md.render(report(findings))
    assert len(text) <= report_md.MAX_CHARS
    assert "report.html and report.json list every site" in text
    assert "## Needs attention" in text and "advice 14" in text  # every advice is still there, once
    assert sum(text.count(f"advice {n} ") for n in range(15)) == 15


def test_the_parity_result_new_files_and_dependencies_are_shown():
    text = report_md.render(report([site("a.py", 1, "NPU203", "rewritten", ".cuda() → .npu()")],
                                   new_files=["pkg/npu_glue.py"],
                                   new_dependencies=[{"module": "torch_npu", "files": ["a.py"]}]), FAILED_PARITY)
    assert "## Parity: FAILED: 0/1 case(s) passed" in text
    assert "| tiny | float32 | FAIL | 0/1 ok, cos 0.990000, abs 5.0e-01 |" in text
    assert "layers.0.input_layernorm" in text
    assert "new file `pkg/npu_glue.py`: the helper module" in text and "new dependency `torch_npu`, imported by 1 file (`a.py`)" in text
    assert "torch-npu" in text


def test_a_large_dependency_matrix_keeps_every_flagged_package_and_stays_under_the_limit():
    rows = [{"name": f"pkg-{i:04d}", "status": "compatible", "replacement": None, "codes": [],
             "declared": [{"path": "requirements.txt", "line": i + 1, "spec": f"pkg-{i:04d}>=1.0" + "x" * 40,
                           "group": "requirements"}]} for i in range(3000)]
    rows.append({"name": "zz-flash-attn", "status": "replace", "replacement": "torch_npu.npu_fusion_attention",
                 "codes": ["NPU130"], "declared": [{"path": "requirements.txt", "line": 3001,
                                                    "spec": "flash-attn", "group": "requirements"}]})
    settings = [{"name": "CUDA_VISIBLE_DEVICES", "code": "NPU221", "action": "rewritten", "path": f"s{i}.sh",
                 "line": 2, "target": "ASCEND_RT_VISIBLE_DEVICES", "message": "m"} for i in range(2000)]
    text = report_md.render(report([], dependencies={"packages": rows, "environment": settings}))
    assert len(text) <= report_md.MAX_CHARS
    assert "| `zz-flash-attn` | replace |" in text  # a package to act on is never cut
    assert "more compatible or unlisted packages" in text and "more settings" in text
