#!/usr/bin/env bash
# `make run`: generate the example bundle, check it, run it and compare its
# output with the same math computed by plain C++ loops (expected.npy).
set -euo pipefail
milrt=${1:-build/milrt}
bin=$(dirname "$milrt")
out=$bin/example
"$bin/make_example" "$out"
echo "--- milrt check $out/ffn.mlmodelc"
"$milrt" check "$out/ffn.mlmodelc"
echo "--- milrt run $out/ffn.mlmodelc --input x=$out/x.npy --output-dir $out/out --compare y=$out/expected.npy"
"$milrt" run "$out/ffn.mlmodelc" --input "x=$out/x.npy" --output-dir "$out/out" \
  --compare "y=$out/expected.npy" --tolerance 0.01
