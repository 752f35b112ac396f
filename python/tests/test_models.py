"""milrt.models.MLModel: coremltools' API on small MIL programs checked
against NumPy: descriptions, flexible shapes, states, errors."""
import numpy as np
import pytest

import milrt
import milrt as ct  # what code written for coremltools swaps in
from helpers import ACCUMULATOR, FLEXIBLE, FP16, MATMUL, write_mil


def test_predict_as_coremltools_code_writes_it(tmp_path):
    model = ct.models.MLModel(str(write_mil(tmp_path, MATMUL)), compute_units=ct.ComputeUnit.CPU_ONLY)
    rng = np.random.default_rng(0)
    x, w, b = rng.standard_normal((2, 3)), rng.standard_normal((3, 4)), rng.standard_normal(4)
    out = model.predict({"x": x, "w": w, "b": b})
    x32, w32, b32 = (v.astype(np.float32).astype(np.float64) for v in (x, w, b))
    np.testing.assert_allclose(out["y"], np.maximum(x32 @ w32 + b32, 0), rtol=1e-5, atol=1e-6)
    assert out["y"].dtype == np.float32
    assert model.compute_unit is ct.ComputeUnit.CPU_ONLY
    assert model.user_defined_metadata == {}
    # A batch as a list of dicts, as coremltools takes it.
    outs = model.predict([{"x": x, "w": w, "b": b}, {"x": -x, "w": w, "b": b}])
    np.testing.assert_array_equal(outs[0]["y"], out["y"])
    np.testing.assert_allclose(outs[1]["y"], np.maximum(-x32 @ w32 + b32, 0), rtol=1e-5, atol=1e-6)


def test_descriptions(tmp_path):
    model = milrt.models.MLModel(write_mil(tmp_path, FP16))
    assert list(model.input_description) == ["x", "k"]
    x = model.input_description["x"]
    assert (x.shape, x.dtype, x.mil_dtype) == ((5,), np.float16, "fp16")
    assert {n: f.dtype for n, f in model.output_description.items()} == {
        "y": np.float16, "e": np.float32, "n": np.int32}
    assert model.state_description == {}
    out = model.predict({"x": np.linspace(0, 1, 5), "k": np.arange(5)})
    assert {n: a.dtype for n, a in out.items()} == {n: f.dtype for n, f in model.output_description.items()}
    np.testing.assert_array_equal(out["n"], np.arange(5) + 3)


def test_flexible_shapes_compile_one_plan_per_shape(tmp_path):
    model = milrt.models.MLModel(write_mil(tmp_path, FLEXIBLE))
    assert model.input_description["x"].shape == (None, 4)
    assert model.output_description["y"].shape == (None, 4)
    for rows in (1, 3, 1, 7, 3):
        x = np.arange(rows * 4, dtype=np.float32).reshape(rows, 4) - 5
        np.testing.assert_array_equal(model.predict({"x": x})["y"], x * x)
    assert sorted(model._plans) == [((1, 4),), ((3, 4),), ((7, 4),)]
    with pytest.raises(milrt.Error, match=r"missing input 'x' \(fp32, \[None, 4\]\)"):
        model.predict({"y": np.zeros((1, 4))})


def test_the_plan_cache_keeps_the_most_recent_shapes(tmp_path):
    model = milrt.models.MLModel(write_mil(tmp_path, FLEXIBLE), plan_cache_size=2)
    for rows in (1, 2, 3, 1):
        x = np.full((rows, 4), rows, np.float32)
        np.testing.assert_array_equal(model.predict({"x": x})["y"], x * x)
    assert list(model._plans) == [((3, 4),), ((1, 4),)]


def test_states_are_independent_streams(tmp_path):
    model = milrt.models.MLModel(write_mil(tmp_path, ACCUMULATOR))
    assert list(model.state_description) == ["acc"] and list(model.input_description) == ["x"]
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    a, b = model.make_state(), model.make_state()
    np.testing.assert_array_equal(model.predict({"x": x}, state=a)["y"], x * x)
    np.testing.assert_array_equal(model.predict({"x": x}, state=a)["y"], (2 * x) ** 2)
    np.testing.assert_array_equal(model.predict({"x": x}, state=b)["y"], x * x)     # b starts at zero
    np.testing.assert_array_equal(model.predict({"x": x}, state=a)["y"], (3 * x) ** 2)  # a kept 2x
    np.testing.assert_array_equal(a.read_state("acc"), 3 * x)
    np.testing.assert_array_equal(b.read_state("acc"), x)
    b.write_state("acc", np.full((2, 3), 0.5))
    np.testing.assert_array_equal(model.predict({"x": x}, state=b)["y"], (0.5 + x) ** 2)
    np.testing.assert_array_equal(model.predict({"x": x}, state=a)["y"], (4 * x) ** 2)


def test_state_errors(tmp_path):
    model = milrt.models.MLModel(write_mil(tmp_path, ACCUMULATOR))
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(milrt.Error, match="is stateful: pass state=model.make_state()"):
        model.predict({"x": x})
    with pytest.raises(milrt.Error, match=r"state 'acc' has shape \[2, 3\], the value \[3\]"):
        model.make_state().write_state("acc", np.zeros(3))
    with pytest.raises(milrt.Error, match="no state 'h'"):
        model.make_state().read_state("h")
    other = milrt.models.MLModel(write_mil(tmp_path, ACCUMULATOR, "other.mil"))
    with pytest.raises(milrt.Error, match="made by this model's make_state"):
        model.predict({"x": x}, state=other.make_state())
    stateless = milrt.models.MLModel(write_mil(tmp_path, MATMUL, "stateless.mil"))
    with pytest.raises(milrt.Error, match="has no states"):
        stateless.make_state()


def test_model_errors(tmp_path):
    with pytest.raises(milrt.Error, match="no such file or directory"):
        milrt.models.MLModel(tmp_path / "absent.mlmodelc")
    model = milrt.models.MLModel(write_mil(tmp_path, MATMUL), skip_model_load=True)
    assert list(model.input_description) == ["x", "w", "b"]
    with pytest.raises(milrt.Error, match="skip_model_load=True"):
        model.predict({})
    with pytest.raises(milrt.Error, match="get_spec"):
        model.get_spec()
    with pytest.raises(milrt.Error, match="no function 'decode'"):
        milrt.models.MLModel(write_mil(tmp_path, MATMUL), function_name="decode")
