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


CASE = "  - {name: a, factory: 'm.py:f', inputs: 'm.py:g'}\n"


def test_yaml_problems_are_file_line_problems(tmp_path):
    """Each of these ended in a traceback (or was silently accepted) before the spec moved onto
    the op table's strict loader."""
    path = tmp_path / "parity.yaml"
    assert problems(write(tmp_path, "cases:\n  - !!python/object:os.system {name: a}\n")) == [
        f"{path}:2: YAML tag !!python/object:os.system is not allowed: only plain values, lists and mappings"
    ]
    assert problems(write(tmp_path, "cases:\n  - ? [a, b]\n    : 1\n")) == [
        f"{path}:2: a mapping key must be a plain value, not a list (unhashable)"
    ]
    deep = "cases:\n" + CASE.replace("'m.py:g'", "{x: {shape: " + "[" * 200 + "]" * 200 + "}}")
    assert problems(write(tmp_path, deep))[0].startswith(f"{path}:2: nested deeper than")
    # a second `cases:` used to replace the first silently
    assert problems(write(tmp_path, "cases:\n" + CASE + "cases:\n" + CASE)) == [
        f"{path}:3: duplicate key 'cases' (first at line 1)"
    ]


def test_non_finite_numbers_are_refused(tmp_path):
    path = write(tmp_path, "cases:\n" + CASE.replace("}", ", tolerance: {float32: {cosine: .nan, max_abs_err: .inf, reason: x}}}"))
    found = problems(path)
    assert found == [f"{path}:2: cosine must be a finite number, got nan", f"{path}:2: max_abs_err must be a finite number, got inf"]
    assert problems(write(tmp_path, "cases:\n" + CASE.replace("'m.py:g'", "{x: {shape: [2], low: nan}}")))[0].endswith(
        "low must be a finite number, got 'nan'")


def test_amp_and_weights(tmp_path):
    (tmp_path / "ckpt.safetensors").write_bytes(b"")
    spec = load_spec(write(tmp_path, "cases:\n" + CASE.replace("}", ", amp: bfloat16, weights: ckpt.safetensors,"
                                                              " tolerance: {amp-bfloat16: {cosine: 0.99, reason: r}}}")))
    (case,) = spec.cases
    assert case.dtypes == ["amp-bfloat16"] and case.weights == tmp_path / "ckpt.safetensors"
    path = tmp_path / "parity.yaml"
    assert problems(write(tmp_path, "cases:\n" + CASE.replace("}", ", amp: float64}"))) == [
        f"{path}:2: amp must be one of bfloat16, float16, got 'float64'"]
    assert "drop its 'dtypes'" in problems(write(tmp_path, "cases:\n" + CASE.replace("}", ", amp: float16, dtypes: [float32]}")))[0]
    assert "nothing is downloaded" in problems(write(tmp_path, "cases:\n" + CASE.replace("}", ", weights: meta-llama/Llama-3}")))[0]


def test_file_references_may_not_climb_out_of_tree_and_spec(tmp_path):
    path = write(tmp_path, "cases:\n" + CASE.replace("'m.py:f'", "'../elsewhere/f.py:build'"))
    assert problems(path) == [f"{path}:2: factory file '../elsewhere/f.py' must lie inside the tree under test or "
                              "beside the spec, not above them ('..' leaves both)"]
    (case,) = load_spec(write(tmp_path, "cases:\n" + CASE.replace("'m.py:f'", "'pkg/../m.py:f'"))).cases
    assert case.factory == Ref("m.py", "f")


def test_train_defaults_and_mapping(tmp_path):
    from npu_migrate.migrate.parity.changes import CHANGES
    from npu_migrate.migrate.parity.spec import Training

    spec = load_spec(write(tmp_path, "cases:\n" + CASE.replace("}", ", train: true, changes: all}")
                           + CASE.replace("name: a", "name: b").replace(
                               "}", ", train: {optimizers: [sgd, adamw-forloop], steps: 5, lr: 0.1, loss: mean_square},"
                                    " changes: [tie, flat-write]}")))
    a, b = spec.cases
    assert a.train == Training(("adamw-foreach", "adamw-fused"), 3, 1e-3, "projection")
    assert a.changes == tuple(CHANGES)
    assert b.train == Training(("sgd", "adamw-forloop"), 5, 0.1, "mean_square") and b.changes == ("tie", "flat-write")
    (c,) = load_spec(write(tmp_path, "cases:\n" + CASE.replace("}", ", train: false}"))).cases
    assert c.train is None and c.changes == ()


def test_train_and_changes_problems_name_their_line(tmp_path):
    path = write(tmp_path, """\
cases:
  - name: a
    factory: m.py:f
    inputs: m.py:g
    train:
      optimizers: [adamw-fused, adam]
      steps: 0
      lr: -1
      loss: l1
      momentum: 0.9
    changes: [tie, data-writes, tie]
  - name: b
    factory: m.py:f
    inputs: m.py:g
    train: yes please
    changes: some
  - name: c
    factory: m.py:f
    inputs: m.py:g
    train: {optimizers: adamw-fused, steps: 2.5}
""")
    found = problems(path)
    assert found == [
        f"{path}:10: unknown key 'momentum' in train (allowed: optimizers, steps, lr, loss)",
        f"{path}:6: unknown optimizer 'adam' (known: adamw-foreach, adamw-fused, adamw-forloop, sgd)",
        f"{path}:7: steps must be an integer from 1 to 100, got 0",
        f"{path}:8: lr must be positive, got -1.0",
        f"{path}:9: loss must be one of projection, mean_square, got 'l1'",
        f"{path}:11: unknown change 'data-writes' (known: data-write, foreach, load-state-dict, nn-init, set, tie, "
        "half-round-trip, parameter-swap, flat-write, buffer-fill, buffer-data)",
        f"{path}:11: a change is listed twice",
        f"{path}:15: train must be true, false or a mapping of optimizers, steps, lr, loss, got 'yes please'",
        f"{path}:16: changes must be 'all' or a non-empty list of data-write, foreach, load-state-dict, nn-init, set, "
        "tie, half-round-trip, parameter-swap, flat-write, buffer-fill, buffer-data",
        f"{path}:20: optimizers must be a non-empty list of adamw-foreach, adamw-fused, adamw-forloop, sgd",
        f"{path}:20: steps must be an integer from 1 to 100, got 2.5",
    ]


def test_train_and_changes_of_the_wrong_type_are_problems_not_crashes(tmp_path):
    path = write(tmp_path, """\
cases:
  - name: a
    factory: m.py:f
    inputs: m.py:g
    train: {optimizers: [[adamw-fused]], loss: [projection], lr: .inf}
    changes: [{tie: 1}]
""")
    assert problems(path) == [
        f"{path}:5: unknown optimizer ['adamw-fused'] (known: adamw-foreach, adamw-fused, adamw-forloop, sgd)",
        f"{path}:5: lr must be a finite number, got inf",
        f"{path}:5: loss must be one of projection, mean_square, got ['projection']",
        f"{path}:6: unknown change {{'tie': 1}} (known: data-write, foreach, load-state-dict, nn-init, set, tie, "
        "half-round-trip, parameter-swap, flat-write, buffer-fill, buffer-data)",
    ]


# -- issue 25 item 7: a time limit per case and a size cap on declared inputs ------------------------------
def test_a_case_may_set_its_time_limit(tmp_path):
    spec = load_spec(write(tmp_path, """\
cases:
  - {name: a, factory: model.py:build, inputs: {x: {shape: [2, 3]}}, timeout: 90}
  - {name: b, factory: model.py:build, inputs: {x: {shape: [2, 3]}}}
"""))
    assert [c.timeout for c in spec.cases] == [90.0, None]
    found = problems(write(tmp_path, """\
cases:
  - {name: a, factory: model.py:build, inputs: {x: {shape: [2, 3]}}, timeout: 0}
  - {name: b, factory: model.py:build, inputs: {x: {shape: [2, 3]}}, timeout: soon}
"""))
    assert any(p.endswith(":2: timeout must be a positive number of seconds, got 0") for p in found), found
    assert any(":3: timeout" in p for p in found), found


def test_declared_inputs_are_capped(tmp_path):
    (found,) = problems(write(tmp_path, """\
cases:
  - name: a
    factory: model.py:build
    inputs: {ids: {shape: [2, 16], dtype: int64, high: 10}, x: {shape: [100000, 100000]}}
"""))
    assert ":4: input 'x' of shape [100000, 100000] has 10,000,000,000 elements, over the cap of 67,108,864" in found
    load_spec(write(tmp_path, "cases:\n  - {name: a, factory: model.py:build, inputs: {x: {shape: [8192, 8192]}}}\n"))
