"""milrt.load / Program: printing, verification, histograms, errors."""
import numpy as np
import pytest

import milrt
from helpers import ACCUMULATOR, MATMUL, program, write_mil


def test_print_parses_back_to_the_same_program(tmp_path):
    p = milrt.load(write_mil(tmp_path, MATMUL))
    text = str(p)
    assert "matmul(x = x, y = w)" in text
    again = milrt.load(write_mil(tmp_path, text, "again.mil"))
    assert str(again) == text


def test_functions_histogram_and_signature(tmp_path):
    p = milrt.load(write_mil(tmp_path, ACCUMULATOR))
    assert p.functions == ["main"]
    assert p.op_histogram() == {"read_state": 2, "add": 1, "coreml_update_state": 1, "mul": 1}
    assert p.op_histogram("main") == p.op_histogram()
    inputs, outputs = p.signature()
    assert inputs == [("x", "fp32", (2, 3), False), ("acc", "fp32", (2, 3), True)]
    assert outputs == [("y", "fp32", (2, 3), False)]
    assert p.verify() == []


def test_verify_names_the_op_that_fails(tmp_path):
    # The declared result type contradicts shape inference ([2, 4] is right).
    bad = MATMUL.replace('tensor<fp32, [2, 4]> m = matmul', 'tensor<fp32, [2, 5]> m = matmul')
    p = milrt.load(write_mil(tmp_path, bad))
    with pytest.raises(milrt.Error, match="matmul") as e:
        p.verify()
    assert "\n" not in str(e.value)


def test_reference_executor_against_numpy(tmp_path):
    p = milrt.load(write_mil(tmp_path, MATMUL))
    rng = np.random.default_rng(1)
    x, w, b = rng.standard_normal((2, 3)), rng.standard_normal((3, 4)), rng.standard_normal(4)
    out = p.run_reference({"x": x, "w": w, "b": b})
    # Inputs are rounded to the declared fp32, then computed in fp64 and rounded once.
    x32, w32, b32 = (v.astype(np.float32).astype(np.float64) for v in (x, w, b))
    np.testing.assert_allclose(out["y"], np.maximum(x32 @ w32 + b32, 0).astype(np.float32), rtol=1e-6)
    assert out["y"].dtype == np.float32


def test_bad_path_is_one_line_error(tmp_path):
    with pytest.raises(milrt.Error) as e:
        milrt.load(tmp_path / "missing.mlmodelc")
    assert "missing.mlmodelc" in str(e.value) and "\n" not in str(e.value)


def test_parse_error_gives_the_position(tmp_path):
    path = write_mil(tmp_path, "program(1.3)\n{\n  func main<ios17>(tensor<fp32, [2]> x) {\n    oops\n")
    with pytest.raises(milrt.Error, match=r"model\.mil:4:\d+: error:"):
        milrt.load(path)


def test_unknown_function_lists_the_functions(tmp_path):
    p = milrt.load(write_mil(tmp_path, MATMUL))
    with pytest.raises(milrt.Error, match=r"no function 'decode' \(functions: main\)"):
        p.signature("decode")
    with pytest.raises(milrt.Error, match="no function 'decode'"):
        milrt.compile(p, function="decode")
    with pytest.raises(milrt.Error, match="no function 'decode'"):
        p.op_histogram("decode")


def test_compile_option_errors(tmp_path):
    p = milrt.load(write_mil(tmp_path, MATMUL))
    with pytest.raises(milrt.Error, match="precision must be 'fp32' or 'bf16', got 'fp8'"):
        milrt.compile(p, precision="fp8")
    with pytest.raises(milrt.Error, match="threads must be at least 1"):
        milrt.compile(p, threads=0)
    assert issubclass(milrt.Error, RuntimeError)


def test_op_without_a_kernel_in_the_reference_only(tmp_path):
    # A program whose op the verifier rejects never reaches compile().
    text = program("tensor<fp32, [2]> x", [("tensor<fp32, [2]>", "y", "no_such_op(x = x)")], "y")
    p = milrt.load(write_mil(tmp_path, text))
    with pytest.raises(milrt.Error, match="no_such_op"):
        milrt.compile(p)
