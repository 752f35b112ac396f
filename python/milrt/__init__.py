"""milrt: Core ML MIL programs compiled and run on CPUs, on Linux.

Two levels:

* ``milrt.models.MLModel(path).predict({...})``: coremltools' API (swap
  ``import coremltools as ct`` for ``import milrt as ct``).
* ``milrt.load(path)`` -> :class:`Program`, ``milrt.compile(program, ...)`` ->
  :class:`Plan` with ``run(dict)`` and zero-copy ``bind(name, array)``.

And ``milrt.llm``: ``train(config="tiny", ...)`` and ``generate(checkpoint, ...)``
for llama2.c-format models.

Every failure of the library is a :class:`milrt.Error` (a RuntimeError) whose
message is one line.
"""
import os as _os

from ._milrt import Error, Plan, Program
from . import _milrt

__version__ = "0.5.0"
__all__ = ["Error", "Plan", "Program", "load", "compile", "models", "llm", "ComputeUnit"]


def load(path):
    """Loads a model: a ``.mlmodelc`` bundle, a ``.mlpackage`` (where this build
    reads them) or a ``.mil`` file. ``str(program)`` prints its MIL text."""
    return _milrt.load(_os.fspath(path))


def compile(program, function="main", precision="fp32", threads=None, input_shapes=None, numerics="fp32"):
    """Compiles one function of a program into a plan.

    precision: "fp32", or "bf16" (matrix products round their operands to bf16
    and accumulate in fp32). numerics: "fp32", or "fp16" (every fp16 value
    rounded as fp16 hardware rounds it). threads: the kernels' thread count
    while this plan runs (default: MILRT_THREADS, else every CPU the process
    may use); a process-wide setting, applied around each run. input_shapes:
    {name: shape} for inputs with flexible ('?') dimensions.
    """
    shapes = {name: [int(d) for d in shape] for name, shape in (input_shapes or {}).items()}
    return _milrt.compile(program, function, precision, threads, shapes, numerics)


from . import models  # noqa: E402  (models uses load and compile)
from .models import ComputeUnit  # noqa: E402  (ct.ComputeUnit.CPU_ONLY)
from . import llm  # noqa: E402
