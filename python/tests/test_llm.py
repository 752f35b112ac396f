"""milrt.llm: training the tiny preset from Python with a progress callback,
and generating from the checkpoint it wrote, checked against `milrt generate`."""
import os
import subprocess

import pytest

import milrt
from helpers import REPO

STEPS = 20


def write_corpus(d):
    """tests/support/tiny_training.cpp's corpus: a few words in fixed sentences,
    learnable in a few dozen steps."""
    subjects = ["the cat", "a dog", "the bird", "my friend", "the old man"]
    verbs = ["sees", "likes", "follows", "finds"]
    objects = ["the ball.", "a red fish.", "the green tree.", "some bread."]
    text = "".join(f"{subjects[(i * 7) % 5]} {verbs[(i * 3) % 4]} {objects[(i * 5 + i // 4) % 4]}\n" for i in range(400))
    p = d / "corpus.txt"
    p.write_text(text)
    return p


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    d = tmp_path_factory.mktemp("run")
    rows = []
    log = milrt.llm.train("tiny", out=d, steps=STEPS, data=write_corpus(d), progress=rows.append, lr=1e-2,
                          warmup=5, eval_every=10, threads=2)
    return d, log, rows


def test_train_progress_and_log(trained):
    d, log, rows = trained
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    assert set(rows[0]) == {"step", "loss", "val_loss", "lr", "grad_norm", "ms", "tok_s", "comm_ms"}
    assert all(r["tok_s"] > 0 and r["comm_ms"] == 0 for r in rows)
    assert rows == log["rows"]
    # Validation at steps 10 and 20 only.
    assert [r["step"] for r in rows if r["val_loss"] is not None] == [10, 20]
    assert log["final_val_loss"] == rows[-1]["val_loss"]
    assert all(r["ms"] > 0 for r in rows) and log["ms_per_step"] > 0
    # The loss falls: from ln(259) ~ 5.56 to well under 4 on this corpus.
    first, last = rows[0]["loss"], sum(r["loss"] for r in rows[-5:]) / 5
    assert first > 5 and last < first - 1.0, [r["loss"] for r in rows]
    assert log["final_val_loss"] < first - 1.0
    assert log["checkpoint"] == str(d / "checkpoint.bin") and os.path.isfile(log["checkpoint"])
    assert "dim 64" in log["config"] and "vocab 259" in log["config"]


def test_train_callback_exception_propagates():
    seen = []

    def progress(row):
        seen.append(row["step"])
        if row["step"] == 3:
            raise ValueError("stop at 3")

    with pytest.raises(ValueError, match="stop at 3"):
        milrt.llm.train("tiny", steps=STEPS, progress=progress, threads=2)
    assert seen == [1, 2, 3]


def test_train_errors(trained, tmp_path):
    d, _, _ = trained
    with pytest.raises(milrt.Error, match="unknown config 'nope'"):
        milrt.llm.train("nope", steps=1)
    with pytest.raises(milrt.Error, match="already holds a run"):
        milrt.llm.train("tiny", out=d, steps=1)
    with pytest.raises(TypeError):
        milrt.llm.train("tiny", steps=1, progress=3)


def test_generate_greedy_matches_cli(trained):
    d, _, _ = trained
    ckpt = d / "checkpoint.bin"
    pieces = list(milrt.llm.generate(ckpt, prompt="the cat", steps=40, temperature=0))
    assert len(pieces) > 1 and all(isinstance(p, str) for p in pieces)
    text = "".join(pieces)
    # 40 positions: BOS and the prompt's 7 bytes, then at most 33 generated
    # (20 steps do not yet make the corpus's sentences).
    assert 0 < len(text) <= 33, text
    echoed = "".join(milrt.llm.generate(ckpt, prompt="the cat", steps=40, temperature=0, echo=True))
    assert echoed == "the cat" + text
    cli = REPO / "build" / "milrt"
    if not os.access(cli, os.X_OK):
        pytest.skip(f"{cli} is not built: no CLI reference for the greedy text")
    out = subprocess.run([str(cli), "generate", "--checkpoint", str(ckpt), "--prompt", "the cat", "--steps", "40",
                          "--temperature", "0"], check=True, capture_output=True, text=True).stdout
    assert out == echoed + "\n"


def test_generate_sampling_seeded(trained):
    d, _, _ = trained
    ckpt = d / "checkpoint.bin"
    a = "".join(milrt.llm.generate(ckpt, prompt="a dog", steps=48, temperature=0.9, seed=7))
    b = "".join(milrt.llm.generate(ckpt, prompt="a dog", steps=48, temperature=0.9, seed=7))
    assert a == b and a
    # int8 weights (blocks of 4: hidden 172): a valid generator too (steps
    # past seq_len clamp to it).
    g = milrt.llm.generate(ckpt, prompt="", steps=1000, temperature=0, weights="int8", block=4)
    assert len("".join(g)) <= 64
    # int4 weights with int8 activations and a bf16 prompt: the greedy text
    # of an approximation, so only its shape is checked; bad values refused.
    g = milrt.llm.generate(ckpt, prompt="a dog", steps=24, temperature=0, weights="int4", block=4,
                           activations="int8", prefill_precision="bf16")
    assert 0 < len("".join(g)) <= 24
    # fp32 block scales (the CLI's --scales fp32): the same greedy text as the CLI's.
    g32 = "".join(milrt.llm.generate(ckpt, prompt="a dog", steps=24, temperature=0, weights="int8", block=4,
                                     scales="fp32", echo=True))
    cli = REPO / "build" / "milrt"
    if os.access(cli, os.X_OK):
        out = subprocess.run([str(cli), "generate", "--checkpoint", str(ckpt), "--prompt", "a dog", "--steps", "24",
                              "--temperature", "0", "--weights", "int8", "--block", "4", "--scales", "fp32"],
                             check=True, capture_output=True, text=True).stdout
        assert out == g32 + "\n"
    with pytest.raises(milrt.Error, match="scale"):
        milrt.llm.generate(ckpt, weights="int8", block=4, scales="fp64")
    with pytest.raises(milrt.Error, match="a scale dtype is for int8 or int4 weights"):
        milrt.llm.generate(ckpt, scales="fp32")
    with pytest.raises(milrt.Error, match="unknown prefill precision 'fp16'"):
        milrt.llm.generate(ckpt, weights="int8", block=4, prefill_precision="fp16")
    with pytest.raises(milrt.Error, match="int8 activations need int8 weights"):
        milrt.llm.generate(ckpt, activations="int8")
    with pytest.raises(milrt.Error):
        milrt.llm.generate(ckpt, weights="fp8")
    with pytest.raises(milrt.Error):
        milrt.llm.generate(d / "missing.bin")
