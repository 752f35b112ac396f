#!/usr/bin/env bash
# `make run`: generate the example bundle, check it, run it, compare with the
# plain-C++ expectation written beside it.
set -euo pipefail
milrt=${1:-build/milrt}
bin=$(dirname "$milrt")
out=$bin/example
"$bin/make_example" "$out"
echo "--- milrt check $out/ffn.mlmodelc"
"$milrt" check "$out/ffn.mlmodelc"
echo "--- milrt run $out/ffn.mlmodelc --input x=$out/x.npy --output-dir $out/out"
"$milrt" run "$out/ffn.mlmodelc" --input "x=$out/x.npy" --output-dir "$out/out"
echo "--- the same math in plain C++ loops (examples/make_example.cpp):"
"$milrt" run "$out/ffn.mlmodelc" --input "x=$out/x.npy" --compare "y=$out/expected.npy" --tolerance 0.01
