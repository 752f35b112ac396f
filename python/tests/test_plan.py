"""milrt.compile / Plan: run(dict) against NumPy, conversions, errors,
zero-copy bind, states, and the GIL released while a plan runs."""
import gc
import threading
import weakref

import numpy as np
import pytest

import milrt
from helpers import ACCUMULATOR, FP16, MATMUL, chain, write_mil


@pytest.fixture
def matmul_plan(tmp_path):
    return milrt.compile(milrt.load(write_mil(tmp_path, MATMUL)))


def expected_matmul(x, w, b):
    x, w, b = (np.asarray(v, np.float32).astype(np.float64) for v in (x, w, b))
    return np.maximum(x @ w + b, 0)


def random_inputs(seed):
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((2, 3)).astype(np.float32),
            "w": rng.standard_normal((3, 4)).astype(np.float32),
            "b": rng.standard_normal(4).astype(np.float32)}


def test_run_matches_numpy(matmul_plan):
    inputs = random_inputs(0)
    out = matmul_plan.run(inputs)
    assert list(out) == ["y"] and out["y"].dtype == np.float32 and out["y"].shape == (2, 4)
    np.testing.assert_allclose(out["y"], expected_matmul(**inputs), rtol=1e-5, atol=1e-6)
    assert matmul_plan.inputs == [("x", "fp32", (2, 3)), ("w", "fp32", (3, 4)), ("b", "fp32", (4,))]
    assert matmul_plan.outputs == [("y", "fp32", (2, 4))]


def test_float64_lists_and_strided_inputs_are_converted(matmul_plan):
    inputs = random_inputs(1)
    x64 = inputs["x"].astype(np.float64)
    w_strided = np.asfortranarray(inputs["w"])
    out = matmul_plan.run({"x": x64, "w": w_strided, "b": inputs["b"].tolist()})
    np.testing.assert_allclose(out["y"], expected_matmul(**inputs), rtol=1e-5, atol=1e-6)


def test_fp16_and_int_ports_convert_as_core_ml(tmp_path):
    plan = milrt.compile(milrt.load(write_mil(tmp_path, FP16)))
    # 1 + 3 * 2^-12 is no fp16 number: the input rounds to 1 + 2^-10 first.
    x = np.array([1 + 3 * 2.0**-12, 0.1, -2.5, 100.3, 0], np.float32)
    k = np.array([1.7, -2.7, 0, 5, -3])  # float64 into int32: truncated, as astype does
    out = plan.run({"x": x, "k": k})
    x16 = x.astype(np.float16).astype(np.float32)
    assert out["y"].dtype == np.float16
    np.testing.assert_array_equal(out["y"], (x16 * 2 + 1).astype(np.float16))
    assert out["e"].dtype == np.float32
    np.testing.assert_array_equal(out["e"], x16 - 1)
    assert out["e"][0] == 2.0**-10
    assert out["n"].dtype == np.int32
    np.testing.assert_array_equal(out["n"], [4, 1, 3, 8, 0])
    # fp16 arrays are taken as they are.
    np.testing.assert_array_equal(plan.run({"x": x.astype(np.float16), "k": k})["e"], x16 - 1)


def test_input_errors_are_one_line(matmul_plan):
    good = random_inputs(2)
    cases = [
        ({k: v for k, v in good.items() if k != "w"}, r"missing input 'w' \(fp32, \[3, 4\]\)"),
        ({**good, "xx": good["x"]}, r"no input 'xx' \(its inputs: x, w, b\)"),
        ({**good, "x": np.zeros((3, 2), np.float32)}, r"input 'x' has shape \[3, 2\] but the plan was compiled for \[2, 3\]"),
        ({**good, "x": np.zeros((2, 3), np.complex64)}, r"input 'x': NumPy dtype complex64 is not a tensor dtype"),
        ({**good, 3: good["x"]}, r"input names are strings"),
    ]
    for inputs, message in cases:
        with pytest.raises(milrt.Error, match=message) as e:
            matmul_plan.run(inputs)
        assert "\n" not in str(e.value)


def test_bind_is_zero_copy(matmul_plan):
    inputs = random_inputs(3)
    for name, array in inputs.items():
        matmul_plan.bind(name, array)
    y = np.empty((2, 4), np.float32)
    matmul_plan.bind("y", y)
    out = matmul_plan.run()
    assert out["y"] is y
    np.testing.assert_allclose(y, expected_matmul(**inputs), rtol=1e-5, atol=1e-6)
    # Changed in place, seen by the next run without binding again.
    inputs["x"][:] = np.arange(6, dtype=np.float32).reshape(2, 3)
    inputs["b"] += 10
    matmul_plan.run()
    np.testing.assert_allclose(y, expected_matmul(**inputs), rtol=1e-5, atol=1e-6)


def test_run_with_a_dict_leaves_bindings_alone(matmul_plan):
    bound, other = random_inputs(4), random_inputs(5)
    for name, array in bound.items():
        matmul_plan.bind(name, array)
    np.testing.assert_allclose(matmul_plan.run(other)["y"], expected_matmul(**other), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(matmul_plan.run()["y"], expected_matmul(**bound), rtol=1e-5, atol=1e-6)
    matmul_plan.unbind("w")
    with pytest.raises(milrt.Error, match="needs every input bound; 'w' is not"):
        matmul_plan.run()


def test_a_bound_array_is_kept_alive(matmul_plan):
    x = np.ones((2, 3), np.float32)
    alive = weakref.ref(x)
    matmul_plan.bind("x", x)
    del x
    gc.collect()
    assert alive() is not None
    matmul_plan.unbind("x")
    gc.collect()
    assert alive() is None


def test_bind_errors(matmul_plan):
    cases = [
        ("x", np.zeros((2, 3)), r"array of dtype float64 for a port stored as float32 \(declared fp32\)"),
        ("x", np.zeros((3, 2), np.float32).T, r"not C-contiguous"),
        ("x", np.zeros((2, 4), np.float32), r"array of shape \[2, 4\] for a port of shape \[2, 3\]"),
        ("x", [[0.0] * 3] * 2, r"bind\(\) takes a NumPy array, got list"),
        ("nope", np.zeros((2, 3), np.float32), r"no input or output of that name"),
    ]
    for name, array, message in cases:
        with pytest.raises(milrt.Error, match=message):
            matmul_plan.bind(name, array)
    y = np.zeros((2, 4), np.float32)
    y.flags.writeable = False
    with pytest.raises(milrt.Error, match="output 'y': the array is read-only"):
        matmul_plan.bind("y", y)


def test_states_persist_between_runs(tmp_path):
    plan = milrt.compile(milrt.load(write_mil(tmp_path, ACCUMULATOR)))
    assert plan.states == [("acc", "fp32", (2, 3))] and plan.inputs == [("x", "fp32", (2, 3))]
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(plan.run({"x": x})["y"], x * x)
    np.testing.assert_array_equal(plan.run({"x": x})["y"], (2 * x) ** 2)
    np.testing.assert_array_equal(plan.state("acc"), 2 * x)
    plan.set_state("acc", np.full((2, 3), 10.0))
    np.testing.assert_array_equal(plan.run({"x": x})["y"], (10 + x) ** 2)
    plan.reset_state()
    np.testing.assert_array_equal(plan.state("acc"), np.zeros((2, 3)))
    with pytest.raises(milrt.Error, match="'acc' is a state of the plan, not an input"):
        plan.run({"x": x, "acc": x})
    with pytest.raises(milrt.Error, match=r"state 'acc' has shape \[2, 3\], the value \[3\]"):
        plan.set_state("acc", np.zeros(3))


def test_thread_count_and_bf16_give_the_products(tmp_path):
    p = milrt.load(write_mil(tmp_path, MATMUL))
    inputs = random_inputs(6)
    want = expected_matmul(**inputs)
    one = milrt.compile(p, threads=1).run(inputs)["y"]
    np.testing.assert_array_equal(one, milrt.compile(p).run(inputs)["y"])
    bf16 = milrt.compile(p, precision="bf16").run(inputs)["y"]
    np.testing.assert_allclose(bf16, want, rtol=2e-2, atol=2e-2)


def test_concurrent_runs_on_one_plan_stay_correct(matmul_plan):
    failures = []

    def worker(seed):
        for i in range(50):
            inputs = random_inputs(seed * 1000 + i)
            got = matmul_plan.run(inputs)["y"]
            if not np.allclose(got, expected_matmul(**inputs), rtol=1e-5, atol=1e-6):
                failures.append((seed, i))

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


def test_the_gil_is_released_while_a_plan_runs(tmp_path):
    # The plan writes its output y first, then runs 400 matmuls. This thread
    # sees y change and cancels the run while it is still going, which it
    # could not do if the running thread held the GIL: the run would then
    # complete, and the cancel would only flag the next one.
    size = 256
    plan = milrt.compile(milrt.load(write_mil(tmp_path, chain(400, size))))
    x = np.zeros((size, size), np.float32)
    w = np.eye(size, dtype=np.float32)
    y = np.zeros((size, size), np.float32)
    for name, array in (("x", x), ("w", w), ("y", y)):
        plan.bind(name, array)
    result = {}

    def run():
        try:
            result["out"] = plan.run()
        except milrt.Error as e:
            result["error"] = str(e)

    t = threading.Thread(target=run)
    t.start()
    while y[0, 0] == 0 and t.is_alive():
        pass
    plan.cancel()
    t.join()
    assert y[0, 0] == 1
    assert result == {"error": "error: cancelled"}
    # Cancelling leaves the plan usable.
    out = plan.run()
    np.testing.assert_array_equal(out[plan.outputs[1][0]], np.ones((size, size), np.float32))
