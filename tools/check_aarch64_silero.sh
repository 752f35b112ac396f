#!/bin/sh
# One Silero VAD chunk through the AArch64 build (under qemu-user) against
# the x86 build's reference executor: the AArch64 reference executor must
# give the same bits, its compiled plan the fp16 model's tolerance
# (5e-3 · max(1, |x|), as test_coreml_zoo's fp16 models).
# Usage: check_aarch64_silero.sh X86_MILRT "QEMU... AARCH64_MILRT"
set -eu
x86=$1
arm=$2
model=../shared/testdata/coreml/silero-vad/silero-vad-unified-v6.0.0.mlmodelc
if [ ! -d "$model" ]; then
  echo "SKIPPED: $model is absent (../shared is not checked out beside this tree)"
  exit 0
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
python3 - "$dir" <<'PY'
import sys, numpy as np
d = sys.argv[1]
np.save(f"{d}/audio.npy", (0.3 * np.sin(np.arange(576) / 7.0)).astype(np.float32).reshape(1, 576))
np.save(f"{d}/zeros.npy", np.zeros((1, 128), np.float32))
PY
inputs="--input audio_input=$dir/audio.npy --input hidden_state=$dir/zeros.npy --input cell_state=$dir/zeros.npy"
"$x86" run "$model" $inputs --engine reference --output-dir "$dir/x86-reference" >/dev/null
export MILRT_THREADS=1 OMP_NUM_THREADS=1 MILRT_TUNE=off
$arm run "$model" $inputs --engine reference --output-dir "$dir/arm-reference" >/dev/null
$arm run "$model" $inputs --output-dir "$dir/arm-compiled" >/dev/null
python3 - "$dir" <<'PY'
import sys, numpy as np
d = sys.argv[1]
bad = False
for name in ["vad_output", "new_hidden_state", "new_cell_state"]:
    want = np.load(f"{d}/x86-reference/{name}.npy")
    ref = np.load(f"{d}/arm-reference/{name}.npy")
    got = np.load(f"{d}/arm-compiled/{name}.npy")
    err = float(np.abs(got - want).max()) / max(1.0, float(np.abs(want).max()))
    same = ref.tobytes() == want.tobytes()
    print(f"aarch64 {name}: reference {'bit-identical to' if same else 'DIFFERS from'} x86's; compiled within {err:.2e}")
    bad |= not same or err > 5e-3
sys.exit(1 if bad else 0)
PY
