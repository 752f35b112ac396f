#!/usr/bin/env bash
# Runs the fuzz targets built in BUILD_DIR for SECONDS each, from copies of
# their seed corpora (fuzz/corpus/<target>/, plus the repository's MIL test
# programs and ../shared's small real ones for mil_parser, and ../shared's
# .mlpackage documents for mlpackage), JOBS at a time.
# Exits non-zero if any target finds a crash, a sanitizer report, a leak, a
# hang (-timeout) or an allocation past -malloc_limit_mb; the input is kept as
# BUILD_DIR/findings/<target>-crash-<sha1> (or leak-, timeout-, oom-).
#   usage: fuzz/run.sh BUILD_DIR SECONDS [JOBS [TARGET...]]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$1" && pwd)
seconds=$2
jobs=${3:-1}
shift $(( $# < 3 ? $# : 3 ))
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for src in "$root"/fuzz/fuzz_*.cpp; do
    name=$(basename "$src" .cpp)
    targets+=("${name#fuzz_}")
  done
fi
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$build/findings"

run_one() {
  local t=$1 corpus=$scratch/corpus-$t log=$scratch/$t.log
  mkdir -p "$corpus"
  cp "$root/fuzz/corpus/$t"/* "$corpus"/
  if [ "$t" = mil_parser ]; then
    cp "$root"/tests/data/seed1/*.mil "$corpus"/
    for f in "$root"/../shared/testdata/coreml/fluidaudio-small/*/model.mil; do
      [ -f "$f" ] && cp "$f" "$corpus/fluidaudio-$(basename "$(dirname "$f")" .mlmodelc).mil"
    done
  fi
  if [ "$t" = mlpackage ]; then
    for f in "$root"/../shared/testdata/coreml/*/*.mlpackage/Data/com.apple.CoreML/model.mlmodel; do
      [ -f "$f" ] && cp "$f" "$corpus/$(basename "$(dirname "$(dirname "$(dirname "$f")")")" .mlpackage).mlmodel"
    done
  fi
  local seeds
  seeds=$(ls "$corpus" | wc -l)
  local dict=()
  [ -f "$root/fuzz/$t.dict" ] && dict=(-dict="$root/fuzz/$t.dict")
  if "$build/fuzz_$t" "$corpus" "${dict[@]}" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
       -malloc_limit_mb=512 -print_final_stats=1 -artifact_prefix="$build/findings/$t-" >"$log" 2>&1; then
    local runs
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    echo "fuzz_$t: ok, $runs runs in ${seconds} s, corpus $seeds -> $(ls "$corpus" | wc -l) inputs"
  else
    tail -n 60 "$log"
    echo "fuzz_$t: FAILED; the input is in $build/findings/ (reproduce: $build/fuzz_$t FILE)"
    touch "$scratch/failed-$t"
  fi
}

for t in "${targets[@]}"; do
  [ -x "$build/fuzz_$t" ] || { echo "no fuzz target $build/fuzz_$t" >&2; exit 2; }
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
  run_one "$t" &
done
wait
if ls "$scratch"/failed-* >/dev/null 2>&1; then
  echo "fuzzing found problems in: $(cd "$scratch" && ls failed-* | sed 's/failed-//' | tr '\n' ' ')"
  exit 1
fi
