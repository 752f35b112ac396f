import os

# Plans choose GEMM backends by the fixed rule, not by timing on a busy
# machine, and never touch the user's tuning cache (as ctest runs them).
os.environ.setdefault("MILRT_TUNE", "off")
