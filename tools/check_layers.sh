#!/bin/sh
# The layering of src/ (README "Source tree"): which folder's files may
# include which. A folder not listed may include nothing of src/ beyond
# itself and the public headers. Run by ctest as test "Layering".
#   kernels    knows nothing of MIL: only dtype/error/tensor public headers
#   reference  shares no code with the fast path (no kernels/, passes/, runtime/)
#   passes     IR to IR; constant folding evaluates with kernels/generic
#   runtime    lowers IR onto kernels
#   ane        the Neural Engine backend: partitions IR, drives a device table;
#              its simulated device evaluates with the reference executor
#   llm        model builders and training on top of everything below
set -eu
root=${1:-$(dirname "$0")/..}
cd "$root/src"
allowed() {  # folder -> space-separated folders it may include (besides itself)
  case $1 in
    util)      echo "milrt" ;;
    kernels)   echo "milrt/dtype.h milrt/error.h milrt/tensor.h" ;;
    ir)        echo "milrt util" ;;
    mil)       echo "milrt util ir" ;;
    reference) echo "milrt util ir" ;;
    passes)    echo "milrt util ir kernels/generic runtime/memory_plan.h" ;;
    autodiff)  echo "milrt util ir passes" ;;
    runtime)   echo "milrt util ir passes kernels" ;;
    ane)       echo "milrt util ir mil passes runtime reference" ;;
    llm)       echo "milrt util ir mil passes autodiff runtime kernels reference ane" ;;
    *)         echo "milrt" ;;
  esac
}
bad=0
for dir in */; do
  dir=${dir%/}
  rules=$(allowed "$dir")
  # Every quoted include that names a folder: file:line:path
  grep -rnoE '^#include "[a-z_0-9]+/[^"]+"' "$dir" | while IFS= read -r hit; do
    path=${hit#*#include \"}; path=${path%\"}
    top=${path%%/*}
    [ "$top" = "$dir" ] && continue
    ok=0
    for r in $rules; do
      case $path in "$r"|"$r"/*) ok=1 ;; esac
    done
    if [ $ok = 0 ]; then
      echo "src/${hit%%:#include*}: src/$dir may not include \"$path\" (allowed: $dir $rules)"
      echo x >&3
    fi
  done 3>>"${TMPDIR:-/tmp}/check_layers.$$"
done
if [ -s "${TMPDIR:-/tmp}/check_layers.$$" ]; then bad=1; fi
rm -f "${TMPDIR:-/tmp}/check_layers.$$"
if [ $bad = 1 ]; then exit 1; fi
echo "layering: ok"
