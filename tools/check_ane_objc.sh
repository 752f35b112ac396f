#!/bin/sh
# Syntax-checks the macOS Neural Engine device (src/ane/macos/ane_private.mm,
# Objective-C++ with ARC) on a machine without Apple's SDK: clang parses it
# against the minimal stub headers in tests/ane_stubs/. This shows that the
# file parses and type-checks against the declared signatures, not that the
# private framework accepts the calls. Run by ctest as test "AneObjcSyntax".
# GCC cannot do this (its Objective-C has no ARC and no literals).
# Exit status: 0 checked, 1 clang's diagnostics, 77 skipped (no clang++;
# CTest's SKIP_RETURN_CODE). CLANGXX overrides which clang++ is used.
set -u
root=${1:-$(dirname "$0")/..}
cd "$root" || exit 1
cxx=${CLANGXX:-}
if [ -n "$cxx" ] && ! command -v "$cxx" >/dev/null 2>&1; then
  echo "AneObjcSyntax: CLANGXX=$cxx not found" >&2
  exit 1
fi
if [ -z "$cxx" ]; then
  for c in clang++ clang++-14 clang++-15 clang++-16 clang++-17 clang++-18 clang++-19; do
    if command -v "$c" >/dev/null 2>&1; then cxx=$c; break; fi
  done
fi
if [ -z "$cxx" ]; then
  echo "SKIP: AneObjcSyntax: clang++ not found (apt-get install clang); src/ane/macos/ane_private.mm was NOT checked"
  exit 77
fi
file=src/ane/macos/ane_private.mm
set -x
"$cxx" -x objective-c++ -std=c++20 -fobjc-arc -fobjc-runtime=gnustep-2.0 -fsyntax-only \
  -Wall -Wextra -Wno-unused-parameter -Werror \
  -I tests/ane_stubs -I src -I include "$file" || exit 1
{ set +x; } 2>/dev/null
echo "ane objc syntax: ok ($file, $("$cxx" --version | head -n 1))"
