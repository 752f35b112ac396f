"""What MLModel.predict costs on top of the plan's own run (run by hand).

    OMP_WAIT_POLICY=passive MILRT_THREADS=1 build/python-venv/bin/python python/bench_predict.py [MODEL] [--runs N] [--cli build/milrt]

Times, per call and as medians over interleaved rounds: MLModel.predict on
a dict of fresh-looking inputs (what a coremltools user writes); Plan.run()
on bound arrays from Python (the plan's own run plus one Python call, no
conversion or allocation of inputs); and, with --cli, `milrt bench` (the plan
in C++ with no Python at all). The default model is the 32 ms Silero VAD
chunk of ../shared, the issue's target: predict within 5 µs of the plan.
"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

os.environ.setdefault("MILRT_TUNE", "off")
# python/ itself holds the package's sources without the extension: import
# the installed milrt, not that.
HERE = pathlib.Path(__file__).resolve().parent
sys.path = [p for p in sys.path if pathlib.Path(p or ".").resolve() != HERE]

import numpy as np  # noqa: E402

import milrt  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[1]
SILERO = REPO.parent / "shared/testdata/coreml/silero-vad/silero-vad-unified-v6.0.0.mlmodelc"


def median_us(fn, runs, rounds=5):
    """Median of per-round medians of single-call times, in µs."""
    medians = []
    for _ in range(rounds):
        times = []
        for _ in range(runs // rounds):
            t = time.perf_counter_ns()
            fn()
            times.append(time.perf_counter_ns() - t)
        medians.append(statistics.median(times) / 1000)
    return statistics.median(medians)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?", default=str(SILERO))
    ap.add_argument("--runs", type=int, default=20000)
    ap.add_argument("--cli", help="the milrt tool, to time `milrt bench` on the same model too")
    args = ap.parse_args()

    model = milrt.models.MLModel(args.model)
    rng = np.random.default_rng(0)
    inputs = {n: rng.uniform(-1, 1, f.shape).astype(f.dtype) for n, f in model.input_description.items()}
    plan = milrt.compile(milrt.load(args.model))
    for name, array in inputs.items():
        plan.bind(name, np.ascontiguousarray(array, np.float32))
    for name, _, shape in plan.outputs:
        plan.bind(name, np.empty(shape, np.float32))
    for _ in range(200):  # warm: kernels' scratch grows on first runs
        model.predict(inputs)
        plan.run()

    bound = predict = 0.0
    for _ in range(3):  # interleaved, so that machine load hits both alike
        bound = median_us(plan.run, args.runs)
        predict = median_us(lambda: model.predict(inputs), args.runs)
    print(f"model: {args.model}")
    print(f"Plan.run() on bound arrays: median {bound:.2f} µs")
    print(f"MLModel.predict(dict):      median {predict:.2f} µs  (+{predict - bound:.2f} µs)")
    if args.cli:
        out = subprocess.run([args.cli, "bench", args.model, "--runs", str(args.runs), "--json"],
                             check=True, capture_output=True, text=True).stdout
        report = json.loads(out.strip().splitlines()[-1])
        cli = report["compiled_ms"] * 1000
        print(f"milrt bench (C++ only):     median {cli:.2f} µs  (predict +{predict - cli:.2f} µs)")


if __name__ == "__main__":
    main()
