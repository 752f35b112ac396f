"""Training and text generation of llama2.c-format Llama models, on CPUs.

* ``milrt.llm.train(config="tiny", out=dir, steps=200, progress=print)``
  trains a preset (as ``milrt train --config``) and returns its log.
* ``milrt.llm.generate(checkpoint, prompt="The", steps=64, temperature=0)``
  yields the text that follows, piece by piece (as ``milrt generate``).

Both run with the GIL released (generation: around each token); errors are
:class:`milrt.Error`.
"""
import codecs as _codecs
import os as _os

from ._milrt import llm as _llm

__all__ = ["train", "generate", "presets"]


def presets():
    """The names ``train(config=...)`` takes."""
    return list(_llm.presets())


def _path(p):
    return "" if p is None else _os.fspath(p)


def generate(checkpoint, prompt="", steps=256, temperature=1.0, top_p=0.9, seed=None, tokenizer=None,
             weights="fp32", block=None, activations="fp32", prefill_precision=None, echo=False, threads=None,
             scales=None):
    """Yields the text generated from a llama2.c checkpoint (version 0 or 1),
    one decoded piece per token, with the KV-cache decoder: ``milrt generate``'s
    loop (run.c's), so ``"".join(generate(...))`` is what the CLI prints after
    the prompt.

    steps: positions run, the prompt (after BOS) included; 0 or more than the
    model's seq_len means seq_len. temperature: 0 is greedy; otherwise softmax
    sampling cut to top_p (nucleus), with llama2.c's xorshift generator seeded
    by ``seed`` (None or 0: the time). Generation stops at BOS. tokenizer: a
    llama2.c tokenizer.bin; None: bytes (vocabulary 259, as ``train``
    writes). weights: "fp32" (the checkpoint in place), "fp16", "bf16" or
    "int8" or "int4" (blocks of ``block`` elements a scale). activations:
    "fp32" (exact) or "int8" (int8/int4 weights only: decode takes integer
    dot products, not exact). prefill_precision: the prompt's matrix
    products, "fp32" (exact) or "bf16" (on AMX or avx512_bf16 where present);
    None: bf16 for bf16 weights, else fp32. echo: yield the prompt's
    pieces first. threads: kernel threads while it computes (default
    MILRT_THREADS, else every CPU). scales: the block scales' dtype of int8
    and int4 weights, "fp16" (None: the default, as llama.cpp's Q8_0/Q4_0)
    or "fp32" (``--scales``).

    The checkpoint is loaded and the decode plan compiled when this is
    called; pieces are computed as they are consumed.
    """
    gen = _llm.Generation(_path(checkpoint), str(prompt), int(steps), float(temperature), float(top_p),
                          None if seed is None else int(seed), _path(tokenizer), str(weights),
                          None if block is None else int(block), str(activations),
                          "" if prefill_precision is None else str(prefill_precision), bool(echo), threads,
                          "" if scales is None else str(scales))
    return _pieces(gen)


def _pieces(gen):
    # Byte tokens may split a UTF-8 character: decode incrementally.
    dec = _codecs.getincrementaldecoder("utf-8")(errors="replace")
    while True:
        b = gen.next()
        if b is None:
            break
        s = dec.decode(b)
        if s:
            yield s
    s = dec.decode(b"", final=True)
    if s:
        yield s


def train(config="tiny", out=None, steps=None, data=None, progress=None, batch=None, seq=0, accum=1, lr=None,
          warmup=None, eval_every=None, eval_batches=4, seed=1, tokenizer=None, init=None, precision="fp32",
          checkpoint_version=0, overwrite=False, verbose=False, threads=None):
    """Trains a Llama preset (``presets()``: "tiny", "stories15m", ...,
    "default") as ``milrt train --config`` does, with its defaults: steps 600
    for "default", else 200; batch 16 for "default", else 8; a validation
    every steps/10 steps and at the end; AdamW (lr 1e-3 and 30 warmup steps
    for "default", else the trainer's). The data is ``data`` (a text file, or
    a .bin of uint16 tokens) or else the embedded corpus; the tokenizer is
    bytes unless ``tokenizer`` names a llama2.c tokenizer.bin. init: start
    from that llama2.c checkpoint (fine-tuning; its shape replaces config's).

    out: a run directory (checkpoint.bin in llama2.c format ``checkpoint_version``,
    train_state.bin, losses.csv, loss.svg, report.txt); None writes nothing.
    A directory holding a run is refused unless ``overwrite``.

    progress: called after every optimizer step with
    ``{"step", "loss", "val_loss" (None when not evaluated), "lr", "grad_norm", "ms",
    "tok_s" (tokens of all ranks per second), "comm_ms" (0 in one process)}``;
    an exception it raises ends training and propagates (so does Ctrl-C).

    Returns ``{"rows": [those dicts], "final_val_loss", "ms_per_step"
    (median), "compile_ms", "train_ms", "wall_ms", "config", "parameters",
    "checkpoint" (path or None)}``.
    """
    dflt = config == "default"
    steps = (600 if dflt else 200) if steps is None else int(steps)
    batch = (16 if dflt else 8) if batch is None else int(batch)
    eval_every = max(1, steps // 10) if eval_every is None else int(eval_every)
    if lr is None:
        lr = 1e-3 if dflt else _default_adamw("lr")
    if warmup is None:
        warmup = 30 if dflt else _default_adamw("warmup")
    if progress is not None and not callable(progress):
        raise TypeError("progress must be callable")
    return _llm.train(str(config), _path(out), steps, _path(data), progress, batch, int(seq), int(accum), float(lr),
                      int(warmup), eval_every, int(eval_batches), int(seed), _path(tokenizer), _path(init),
                      str(precision), int(checkpoint_version), bool(overwrite), bool(verbose), threads)


def _default_adamw(name):
    return _llm.adamw_defaults()[name]
