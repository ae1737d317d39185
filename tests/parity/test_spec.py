from pathlib import Path

import pytest

from npu_migrate.migrate.parity.spec import Ref, SpecError, TensorSpec, load_spec


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "parity.yaml"
    path.write_text(text)
    return path


def problems(path: Path):
    with pytest.raises(SpecError) as info:
        load_spec(path)
    return info.value.problems


def test_valid_spec(tmp_path):
    spec = load_spec(write(tmp_path, """\
cases:
  - name: a
    factory: model.py:build
    inputs: pkg.inputs:make
    dtypes: [float32, bfloat16]
    train: true
    output: 0
    tolerance:
      bfloat16: {cosine: 0.99, max_abs_err: 5e-2, reason: "bf16 softmax"}
  - name: b
    factory: pkg.model:Model.build
    kwargs: {layers: 1}
    inputs: {ids: {shape: [2, 4], dtype: int64, high: 10}, x: {shape: [2, 3]}}
"""))
    a, b = spec.cases
    assert a.factory == Ref("model.py", "build") and a.factory.is_file
    assert a.tolerance["bfloat16"] == {"cosine": 0.99, "max_abs_err": 0.05, "reason": "bf16 softmax"}
    assert b.dtypes == ["float32"] and b.kwargs == {"layers": 1}
    assert b.inputs["x"] == TensorSpec((2, 3), "float")


def test_errors_carry_file_and_line(tmp_path):
    path = write(tmp_path, """\
cases:
  - name: a
    factory: model.py:build
    factroy: typo
    inputs: {ids: {shape: [2], dtype: int64}}
    dtypes: [float32, float64]
    tolerance:
      float32: {cosine: 0.9}
  - name: a
    factory: not a ref
    inputs: model.py:make
""")
    found = problems(path)
    assert f"{path}:4: unknown key 'factroy' in a case" in found[0]
    text = "\n".join(found)
    assert f"{path}:5: integer input 'ids' needs 'high'" in text
    assert f"{path}:6: unsupported dtype 'float64'" in text
    assert f"{path}:8: tolerance for float32 needs a 'reason'" in text
    assert f"{path}:10: factory must be 'file.py:callable'" in text


def test_missing_keys_and_bad_yaml(tmp_path):
    assert problems(write(tmp_path, "cases:\n  - name: a\n")) == [
        f"{tmp_path / 'parity.yaml'}:2: case is missing required key 'factory'",
        f"{tmp_path / 'parity.yaml'}:2: case is missing required key 'inputs'",
    ]
    assert ":2: invalid YAML" in problems(write(tmp_path, "cases: [\n  - : :\n"))[0]
    assert "non-empty list" in problems(write(tmp_path, "cases: []\n"))[0]
