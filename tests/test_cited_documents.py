"""A clone carries every document its docs, explain pages, op table and code cite."""

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FACTS = "opmap/reference/torch_npu_facts.md"
THIS = "tests/test_cited_documents.py"  # names the things it looks for
OUTSIDE = "../" + "shared/"  # a path out of the repository (spelt in two parts so this file does not match)


def tracked_text_files():
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, check=False)
    paths = [p for p in listed.stdout.decode().split("\0") if p] if listed.returncode == 0 else \
        [p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*") if p.is_file() and ".git" not in p.parts]
    for rel in paths:
        if rel.endswith((".py", ".md", ".yaml", ".txt", ".toml")) and (ROOT / rel).is_file():
            yield rel, (ROOT / rel).read_text(encoding="utf-8", errors="replace")


def test_the_cited_torch_npu_facts_are_in_the_repository_and_cited_by_their_path():
    assert (ROOT / FACTS).is_file()
    sections = set(re.findall(r"^#+ .*?(§?\d+(?:\.\d+)*)", (ROOT / FACTS).read_text(), re.M))
    assert sections  # the sections the citations point into
    outside, unnamed = [], []
    for rel, text in tracked_text_files():
        if rel == THIS:
            continue
        if OUTSIDE in text:
            outside.append(rel)
        if rel != FACTS:
            for line in text.splitlines():
                if "torch_npu_facts" in line and "torch_npu_facts.md" not in line:
                    unnamed.append(f"{rel}: {line.strip()[:80]}")
    assert outside == []  # a path out of the repository: a clone does not have it
    assert unnamed == []  # every citation names the file (found under opmap/reference/)


def test_the_explain_pages_cite_the_repository_copy():
    pages = (ROOT / "migrate/docs").glob("NPU*.md")
    citing = [p.name for p in pages if "torch_npu_facts" in p.read_text()]
    assert citing and all(FACTS in (ROOT / "migrate/docs" / name).read_text() for name in citing)
