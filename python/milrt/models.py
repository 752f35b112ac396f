"""coremltools' ``ct.models.MLModel`` on milrt: code written for coremltools
runs by swapping the import (``import milrt as ct``).

Differences from Core ML:

* ``compute_units`` is accepted and ignored: milrt runs on the CPU only.
* A plan computes floats in fp32, also for fp16 models (more accurate than
  the Neural Engine or GPU, which round after every op); pass
  ``numerics="fp16"`` to round as they do.
* Inputs are converted as Core ML converts them: each array is cast to its
  input's declared dtype (a float64 array for an fp32 input, an fp32 array for
  an fp16 input, which rounds it). Outputs come in their declared dtype
  (fp16 outputs as np.float16; bf16 and fp8, which NumPy lacks, as float32).
* A name the model does not take is an error (Core ML ignores extra keys).
* Flexible-shape models compile one plan per set of input shapes, on first
  use, and keep the ``plan_cache_size`` most recent.
"""
import collections
import enum
import os

import numpy as np

from . import _description
from ._milrt import Error
from . import compile as _compile, load as _load

__all__ = ["MLModel", "MLState", "ComputeUnit"]


class ComputeUnit(enum.Enum):
    """coremltools' compute units; milrt accepts them and runs on the CPU."""
    ALL = 1
    CPU_ONLY = 2
    CPU_AND_GPU = 3
    CPU_AND_NE = 4


class MLState:
    """The states of a stateful (iOS18) model for one stream of predictions.

    Between predictions with the same state on the same model the values stay
    in the plan's buffers (no copies); they are copied out when another state
    takes the plan, or when read.
    """

    def __init__(self, model, values):
        self._model = model
        self._values = values   # name -> array; None while the plan holds them
        self._plan = None

    def read_state(self, name):
        self._sync()
        if name not in self._values:
            raise Error(f"error: the model has no state '{name}'")
        return self._values[name].copy()

    def write_state(self, name, value):
        self._sync()
        feature = self._model.state_description.get(name)
        if feature is None:
            raise Error(f"error: the model has no state '{name}'")
        value = _as_array(value, feature.dtype)
        if value.shape != feature.shape:
            raise Error(f"error: state '{name}' has shape {list(feature.shape)}, the value {list(value.shape)}")
        self._values[name] = value.copy()

    def _sync(self):
        plan = self._plan
        if plan is not None:
            self._values = {name: plan.state(name) for name in self._model.state_description}
            self._plan = None
            self._model._holders.pop(plan, None)

    def _take(self, plan):
        """Puts this state's values into the plan's buffers."""
        if self._plan is plan:
            return
        self._sync()
        holder = self._model._holders.get(plan)
        if holder is not None:
            holder._sync()
        for name, value in self._values.items():
            plan.set_state(name, value)
        self._values, self._plan = None, plan
        self._model._holders[plan] = self


def _as_array(value, dtype):
    return np.asarray(value).astype(dtype, copy=False)


class MLModel:
    """A Core ML model (``.mlmodelc``, ``.mlpackage`` where this build reads
    them, or ``.mil``) compiled for this CPU.

    compute_units: accepted for coremltools compatibility and ignored.
    function_name: the function of a multifunction model (default: the
    package's default function, else "main").
    precision, numerics, threads: as for ``milrt.compile``.
    """

    def __init__(self, model, compute_units=None, function_name=None, *, skip_model_load=False,
                 precision="fp32", numerics="fp32", threads=None, plan_cache_size=16, **ignored):
        if not isinstance(model, (str, os.PathLike)):
            raise Error("error: MLModel takes the path of a model; milrt cannot build one from a spec object")
        self.path = os.fspath(model)
        self.compute_unit = compute_units if compute_units is not None else ComputeUnit.ALL
        meta = _description.metadata(self.path)
        self.function_name = function_name or meta["default_function"] or "main"
        self._options = dict(function=self.function_name, precision=precision, numerics=numerics, threads=threads)
        self._program = _load(self.path)
        inputs, outputs, states = _description.features(self._program.signature(self.function_name))
        self.input_description, self.output_description, self.state_description = inputs, outputs, states
        self._flexible = tuple(name for name, f in inputs.items() if None in f.shape)
        self.user_defined_metadata = meta["user_defined_metadata"]
        self.author, self.license = meta["author"], meta["license"]
        self.short_description, self.version = meta["short_description"], meta["version"]
        self._plans = collections.OrderedDict()   # input shapes -> plan (flexible models)
        self._plan_cache_size = max(1, int(plan_cache_size))
        self._holders = {}                         # plan -> the MLState in its buffers
        self._plan = None
        if not self._flexible and not skip_model_load:
            self._plan = _compile(self._program, **self._options)

    def predict(self, data, state=None):
        """Runs the model on {input name: array}; returns {output name: array}.
        A list of dicts gives a list of results, as in coremltools."""
        if isinstance(data, list):
            return [self.predict(d, state) for d in data]
        plan = self._plan
        if plan is None:
            plan = self._plan_for(data)
        if state is None:
            if self.state_description:
                raise Error(f"error: {self.path} is stateful: pass state=model.make_state()")
            return plan.run(data)
        if not isinstance(state, MLState) or state._model is not self:
            raise Error("error: state= takes an MLState made by this model's make_state()")
        state._take(plan)
        return plan.run(data)

    def make_state(self):
        """A new state, every value zero (as Core ML's)."""
        if not self.state_description:
            raise Error(f"error: {self.path} has no states (not an iOS18 stateful model)")
        return MLState(self, {n: np.zeros(f.shape, f.dtype) for n, f in self.state_description.items()})

    def get_spec(self):
        raise Error("error: get_spec() needs coremltools' protobuf classes, which milrt does not provide")

    def _plan_for(self, data):
        if self._plan is None and not self._flexible:
            raise Error(f"error: {self.path} was opened with skip_model_load=True: it cannot predict")
        try:
            key = tuple(np.shape(data[n]) for n in self._flexible)
        except KeyError as e:
            f = self.input_description[e.args[0]]
            raise Error(f"error: missing input '{f.name}' ({f.mil_dtype}, {list(f.shape)})") from None
        plan = self._plans.get(key)
        if plan is not None:
            self._plans.move_to_end(key)
            return plan
        plan = _compile(self._program, input_shapes=dict(zip(self._flexible, key)), **self._options)
        self._plans[key] = plan
        if len(self._plans) > self._plan_cache_size:
            _, old = self._plans.popitem(last=False)
            holder = self._holders.get(old)
            if holder is not None:
                holder._sync()
        return plan

    def __repr__(self):
        ins = ", ".join(f"{n}: {f.mil_dtype} {list(f.shape)}" for n, f in self.input_description.items())
        return f"MLModel({self.path!r}, function {self.function_name!r}: {ins})"
