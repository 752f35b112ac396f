#!/usr/bin/env python3
"""Builds milrt's Core ML conformance zoo (issue #16 part 3).

Small PyTorch models are traced and converted by coremltools to ML Program
`.mlpackage`s at fp32 and fp16 compute precision. For each one the package,
its inputs and PyTorch's outputs (.npy) and a manifest.json are written to
tests/data/coreml_zoo/<name>_<fp32|fp16>/, which tests/test_coreml_zoo.cpp
runs through milrt (compiled and reference executor).

Run by hand (not by CI); see tools/coreml_zoo/README.md for the setup:
    python tools/coreml_zoo/make_zoo.py [--out DIR] [--only NAME ...]
"""
import argparse
import json
import os
import shutil
import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import coremltools as ct

warnings.filterwarnings("ignore")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# ---------------------------------------------------------------------------
# Models. Layer sizes are tiny so the committed zoo stays a few hundred KB.
# ---------------------------------------------------------------------------

class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 32)
        self.ln = nn.LayerNorm(32)
        self.fc3 = nn.Linear(32, 10)

    def forward(self, x):
        x = F.relu(self.fc1(x))
        x = F.gelu(self.fc2(x))
        x = self.ln(x)
        return F.softmax(self.fc3(x), dim=-1)


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)       # depthwise
        self.bn2 = nn.BatchNorm2d(8)
        self.grouped = nn.Conv2d(8, 16, 3, padding=1, groups=4)  # grouped
        self.conv2 = nn.Conv2d(16, 8, 1)
        self.conv3 = nn.Conv2d(8, 8, 3, stride=2, padding=1)
        self.fc = nn.Linear(8 * 2 * 2, 10)

    def forward(self, x):                                   # [1, 3, 16, 16]
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.max_pool2d(x, 2)                              # 8x8
        x = F.relu(self.bn2(self.dw(x)))
        x = F.relu(self.grouped(x))
        x = F.avg_pool2d(x, 2)                              # 4x4
        x = F.interpolate(x, scale_factor=2, mode="nearest")  # 8x8
        x = self.conv2(x)
        x = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)  # 16x16
        x = F.relu(self.conv3(x))                           # 8x8
        x = F.adaptive_avg_pool2d(x, (2, 2))
        x = torch.flatten(x, 1)
        return self.fc(x)


class ConvNet(nn.Module):
    """CNN's convolutions without pooling or upsampling (which milrt lacks so far)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.dw = nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=8)  # depthwise
        self.bn2 = nn.BatchNorm2d(8)
        self.grouped = nn.Conv2d(8, 16, 3, stride=2, padding=1, groups=4)  # grouped
        self.conv2 = nn.Conv2d(16, 8, 1)
        self.fc = nn.Linear(8 * 4 * 4, 10)

    def forward(self, x):                                   # [1, 3, 16, 16]
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.bn2(self.dw(x)))                    # 8x8
        x = F.relu(self.grouped(x))                         # 4x4
        x = torch.flatten(self.conv2(x), 1)
        return self.fc(x)


class LSTMNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(8, 16, batch_first=True)

    def forward(self, x):
        y, (h, c) = self.rnn(x)
        return y, h, c


class GRUNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.GRU(8, 16, batch_first=True)

    def forward(self, x):
        y, h = self.rnn(x)
        return y, h


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.0,
                                                batch_first=True)

    def forward(self, x):
        return self.layer(x)


class GPT2Block(nn.Module):
    """Pre-norm causal decoder block as in GPT-2 (tanh GELU, fused qkv)."""

    def __init__(self, d=32, heads=4):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)

    def forward(self, x):                                   # [B, T, d]
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q = q.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class KVCacheToy(nn.Module):
    """One attention head over a rolling key/value cache held in Core ML states."""

    def __init__(self, d=16, window=8):
        super().__init__()
        self.q = nn.Linear(d, d)
        self.k = nn.Linear(d, d)
        self.v = nn.Linear(d, d)
        self.register_buffer("k_cache", torch.zeros(1, window, d))
        self.register_buffer("v_cache", torch.zeros(1, window, d))

    def forward(self, x):                                   # [1, 1, d]: one token
        self.k_cache[:, :-1] = self.k_cache[:, 1:].clone()
        self.v_cache[:, :-1] = self.v_cache[:, 1:].clone()
        self.k_cache[:, -1:] = self.k(x)
        self.v_cache[:, -1:] = self.v(x)
        s = self.q(x) @ self.k_cache.transpose(1, 2) / 4.0
        return torch.softmax(s, dim=-1) @ self.v_cache


# name -> (constructor, {input name: shape}, [output names]).
# Tolerances (TOL below) bound max|milrt - torch| / max(1, max|torch|) per output.
ZOO = {
    "mlp": (MLP, {"x": (4, 16)}, ["y"]),
    "cnn": (CNN, {"x": (1, 3, 16, 16)}, ["y"]),
    "convnet": (ConvNet, {"x": (1, 3, 16, 16)}, ["y"]),
    "lstm": (LSTMNet, {"x": (2, 5, 8)}, ["y", "h", "c"]),
    "gru": (GRUNet, {"x": (2, 5, 8)}, ["y", "h"]),
    "transformer_encoder": (Encoder, {"x": (2, 6, 32)}, ["y"]),
    "gpt2_block": (GPT2Block, {"x": (1, 8, 32)}, ["y"]),
}
# fp32: both sides compute in fp32 (different summation orders, transcendental
# approximations): milrt measured <= 1.6e-7 of the output scale; 1e-5 leaves
# two orders of margin (e.g. for other GEMM backends).
# fp16: coremltools stores weights and declares every intermediate fp16
# (fp16 ulp 2^-11 ~ 4.9e-4 relative); milrt measured <= 1.1e-3 (a couple of
# fp16 ulps, transformer encoder with fp16 rounding after every op); 5e-3
# leaves about 5x margin.
TOL = {"fp32": 1e-5, "fp16": 5e-3}


def save_case(out_root, name, mlmodel, inputs, outputs, tolerance, note, states=None, steps=None):
    d = os.path.join(out_root, name)
    if os.path.exists(d):
        shutil.rmtree(d)
    os.makedirs(d)
    mlmodel.save(os.path.join(d, "model.mlpackage"))
    man = {"model": "model.mlpackage", "inputs": [], "outputs": [], "tolerance": tolerance,
           "tolerance_meaning": "max|milrt - torch| <= tolerance * max(1, max|torch|), per output",
           "note": note, "torch": torch.__version__, "coremltools": ct.__version__}
    if steps is None:
        steps_list = [(inputs, outputs)]
    else:
        steps_list = steps
        man["steps"] = len(steps)
        man["states"] = states
    # Files: <kind>_<name>.npy, or <kind>_<name>_step<i>.npy for stateful models
    # (the manifest then lists the pattern with a literal "{i}").
    suffix = lambda i: "" if steps is None else f"_step{i}"
    for i, (ins, outs) in enumerate(steps_list):
        for kind, key, values in (("input", "inputs", ins), ("expected", "outputs", outs)):
            for k, v in values.items():
                np.save(os.path.join(d, f"{kind}_{k}{suffix(i)}.npy"), v)
                if i == 0:
                    pattern = f"{kind}_{k}" + ("" if steps is None else "_step{i}") + ".npy"
                    man[key].append({"name": k, "file": pattern, "shape": list(v.shape), "dtype": str(v.dtype)})
    with open(os.path.join(d, "manifest.json"), "w") as f:
        json.dump(man, f, indent=2)
        f.write("\n")
    print(f"wrote {d}")


def convert(traced, in_shapes, out_names, precision, target=ct.target.iOS16, states=None):
    return ct.convert(
        traced,
        inputs=[ct.TensorType(name=k, shape=s) for k, s in in_shapes.items()],
        outputs=[ct.TensorType(name=n) for n in out_names],
        states=states,
        convert_to="mlprogram",
        minimum_deployment_target=target,
        compute_precision=ct.precision.FLOAT32 if precision == "fp32" else ct.precision.FLOAT16,
        skip_model_load=True,  # Linux: no Core ML framework to load it with
    )


def randomize_batchnorm(model, gen):
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=gen) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=gen) + 0.5)
            m.weight.data.copy_(torch.rand(m.num_features, generator=gen) + 0.5)
            m.bias.data.copy_(torch.randn(m.num_features, generator=gen) * 0.1)


def build_plain(name, out_root):
    ctor, in_shapes, out_names = ZOO[name]
    torch.manual_seed(0)
    model = ctor().eval()
    randomize_batchnorm(model, torch.Generator().manual_seed(1))
    gen = torch.Generator().manual_seed(2)
    xs = {k: torch.randn(*s, generator=gen) for k, s in in_shapes.items()}
    traced = torch.jit.trace(model, tuple(xs.values()), check_trace=False)
    with torch.no_grad():
        ys = model(*xs.values())
    if not isinstance(ys, tuple):
        ys = (ys,)
    ins = {k: v.numpy().astype(np.float32) for k, v in xs.items()}
    outs = {n: y.numpy().astype(np.float32) for n, y in zip(out_names, ys)}
    for prec in ("fp32", "fp16"):
        ml = convert(traced, in_shapes, out_names, prec)
        save_case(out_root, f"{name}_{prec}", ml, ins, outs, TOL[prec],
                  f"{ctor.__name__} at {prec} compute precision; expected = PyTorch fp32 eager outputs")
    return model, traced, ins, outs


def build_compressed(out_root):
    """The fp32 MLP through coremltools' compression APIs (expected: the uncompressed PyTorch MLP)."""
    from coremltools.optimize import coreml as cto
    ctor, in_shapes, out_names = ZOO["mlp"]
    torch.manual_seed(0)
    model = ctor().eval()
    gen = torch.Generator().manual_seed(2)
    xs = {k: torch.randn(*s, generator=gen) for k, s in in_shapes.items()}
    traced = torch.jit.trace(model, tuple(xs.values()), check_trace=False)
    with torch.no_grad():
        y = model(*xs.values())
    ins = {k: v.numpy() for k, v in xs.items()}
    outs = {"y": y.numpy()}
    base = convert(traced, in_shapes, out_names, "fp32")
    # The tolerances bound the compression error itself (outputs are softmax
    # probabilities in [0, 1]): int8 per-channel weights perturb them by 8e-4
    # (milrt measured), 4-bit uniform palettes by 1.7e-2; about 3-6x margin.
    q8 = cto.linear_quantize_weights(base, cto.OptimizationConfig(
        global_config=cto.OpLinearQuantizerConfig(mode="linear_symmetric", dtype="int8", weight_threshold=0)))
    save_case(out_root, "mlp_int8", q8, ins, outs, 5e-3,
              "fp32 MLP, weights int8 linear_symmetric per channel (linear_quantize_weights); "
              "expected = uncompressed PyTorch outputs")
    pal = cto.palettize_weights(base, cto.OptimizationConfig(
        global_config=cto.OpPalettizerConfig(mode="uniform", nbits=4, weight_threshold=0)))
    save_case(out_root, "mlp_palettized4", pal, ins, outs, 5e-2,
              "fp32 MLP, weights 4-bit uniform palettes (palettize_weights); expected = uncompressed PyTorch outputs")


def build_stateful(out_root):
    torch.manual_seed(0)
    model = KVCacheToy().eval()
    gen = torch.Generator().manual_seed(2)
    steps_x = [torch.randn(1, 1, 16, generator=gen) for _ in range(3)]
    traced = torch.jit.trace(model, (steps_x[0],), check_trace=False)
    # tracing ran one step: start again from empty caches
    model.k_cache.zero_(); model.v_cache.zero_()
    steps = []
    with torch.no_grad():
        for x in steps_x:
            steps.append(({"x": x.numpy()}, {"y": model(x).numpy()}))
    # Core ML states must be fp16, so this model is converted at fp16 only.
    states = [ct.StateType(wrapped_type=ct.TensorType(shape=(1, 8, 16), dtype=np.float16), name="k_cache"),
              ct.StateType(wrapped_type=ct.TensorType(shape=(1, 8, 16), dtype=np.float16), name="v_cache")]
    for prec in ("fp16",):
        ml = convert(traced, {"x": (1, 1, 16)}, ["y"], prec, target=ct.target.iOS18, states=states)
        save_case(out_root, f"kv_cache_{prec}", ml, None, None, TOL[prec],
                  f"rolling KV cache in two ct.StateType states (iOS18) at {prec}; states start at zero "
                  "and persist over the steps", states=["k_cache", "v_cache"], steps=steps)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "data", "coreml_zoo"))
    ap.add_argument("--only", nargs="*")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    names = list(ZOO) + ["compressed", "kv_cache"]
    for n in names:
        if a.only and n not in a.only:
            continue
        if n == "compressed":
            build_compressed(a.out)
        elif n == "kv_cache":
            build_stateful(a.out)
        else:
            build_plain(n, a.out)


if __name__ == "__main__":
    main()
