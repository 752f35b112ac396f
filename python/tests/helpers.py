"""MIL programs small enough to check with NumPy, and the shared test data."""
import os
import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


def shared_dir():
    """../shared beside the repository (or MILRT_SHARED_DIR), or None."""
    p = pathlib.Path(os.environ.get("MILRT_SHARED_DIR", REPO.parent / "shared"))
    return p if (p / "testdata").is_dir() else None


def require_shared():
    d = shared_dir()
    if d is None:
        pytest.skip("../shared is absent (a user's clone): test data unavailable")
    return d


def write_mil(tmp_path, text, name="model.mil"):
    path = tmp_path / name
    path.write_text(text)
    return path


def program(params, body, outputs, opset="ios17"):
    """A one-function program; body lines are `type name = op(...)`."""
    lines = "".join(f'    {t} {n} = {op}[name = string("{n}")];\n' for t, n, op in body)
    return f"program(1.3)\n{{\n  func main<{opset}>({params}) {{\n{lines}  }} -> ({outputs});\n}}\n"


# y = relu(x @ w + b)
MATMUL = program(
    "tensor<fp32, [2, 3]> x, tensor<fp32, [3, 4]> w, tensor<fp32, [4]> b",
    [("tensor<fp32, [2, 4]>", "m", "matmul(x = x, y = w)"),
     ("tensor<fp32, [2, 4]>", "a", "add(x = m, y = b)"),
     ("tensor<fp32, [2, 4]>", "y", "relu(x = a)")],
    "y")

# fp16 and int32 ports: y = x * 2 + 1 (fp16), e = fp32(x) - 1 (shows how x
# was rounded on the way in), n = k + 3 (int32).
FP16 = program(
    "tensor<fp16, [5]> x, tensor<int32, [5]> k",
    [("tensor<fp16, [5]>", "d", "mul(x = x, y = fp16(2))"),
     ("tensor<fp16, [5]>", "y", "add(x = d, y = fp16(1))"),
     ("tensor<fp32, [5]>", "c", 'cast(x = x, dtype = string("fp32"))'),
     ("tensor<fp32, [5]>", "e", "sub(x = c, y = fp32(1))"),
     ("tensor<int32, [5]>", "n", "add(x = k, y = int32(3))")],
    "y, e, n")

# Flexible: x [?, 4] -> y = x * x.
FLEXIBLE = program(
    "tensor<fp32, [?, 4]> x",
    [("tensor<fp32, [?, 4]>", "y", "mul(x = x, y = x)")],
    "y")

# iOS18 state: acc += x; y = acc * acc (read after the update).
ACCUMULATOR = program(
    "tensor<fp32, [2, 3]> x, state<tensor<fp32, [2, 3]>> acc",
    [("tensor<fp32, [2, 3]>", "a", "read_state(input = acc)"),
     ("tensor<fp32, [2, 3]>", "s", "add(x = a, y = x)"),
     ("tensor<fp32, [2, 3]>", "u", "coreml_update_state(state = acc, value = s)"),
     ("tensor<fp32, [2, 3]>", "b", "read_state(input = acc)"),
     ("tensor<fp32, [2, 3]>", "y", "mul(x = b, y = b)")],
    "y", opset="ios18")


def chain(n, size):
    """y = x + 1 (an output, written as soon as the run starts), then z = n
    matmuls of size x size after it: a plan that runs long after y is set."""
    body = [(f"tensor<fp32, [{size}, {size}]>", "y", "add(x = x, y = fp32(1))")]
    prev = "y"
    for i in range(n):
        body.append((f"tensor<fp32, [{size}, {size}]>", f"z{i}", f"matmul(x = {prev}, y = w)"))
        prev = f"z{i}"
    return program(f"tensor<fp32, [{size}, {size}]> x, tensor<fp32, [{size}, {size}]> w", body, f"y, {prev}")
