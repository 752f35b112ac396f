"""What a model says about itself: features (from the MIL function) and
metadata (an .mlpackage's description, a .mlmodelc bundle's metadata.json)."""
import json
import os
from typing import NamedTuple, Optional, Tuple

import numpy as np

# MIL dtype -> the NumPy dtype predict() takes and returns (NumPy has no
# bf16 or fp8: those are float32; sub-byte integers are one byte each).
_NUMPY = {
    "bool": np.bool_, "fp16": np.float16, "bf16": np.float32, "fp32": np.float32, "fp64": np.float64,
    "fp8e4m3": np.float32, "fp8e5m2": np.float32,
    "int4": np.int8, "int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64,
    "uint1": np.uint8, "uint2": np.uint8, "uint3": np.uint8, "uint4": np.uint8, "uint6": np.uint8,
    "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64,
}


class Feature(NamedTuple):
    """An input, output or state. shape: None for a flexible dimension."""
    name: str
    shape: Tuple[Optional[int], ...]
    dtype: np.dtype          # what predict() takes and returns
    mil_dtype: str           # as declared: "fp16", "int32", ...


def features(signature):
    """(inputs, outputs, states) of Program.signature() as name -> Feature."""
    ins, outs = signature
    inputs, outputs, states = {}, {}, {}
    for name, dtype, shape, is_state in ins:
        (states if is_state else inputs)[name] = _feature(name, dtype, shape)
    for name, dtype, shape, _ in outs:
        outputs[name] = _feature(name, dtype, shape)
    return inputs, outputs, states


def _feature(name, dtype, shape):
    return Feature(name, tuple(None if d < 0 else d for d in shape), np.dtype(_NUMPY.get(dtype, np.float32)), dtype)


def metadata(path):
    """author, license, version, short_description, user_defined_metadata and
    default_function of a model: an .mlpackage's description, a .mlmodelc's
    metadata.json, nothing for a .mil file."""
    from . import _milrt
    package = _milrt.load_description(os.fspath(path))
    if package is not None:
        return package
    meta = bundle_metadata(path)
    return {"author": meta.get("author", ""), "license": meta.get("license", ""),
            "version": meta.get("version", ""), "short_description": meta.get("shortDescription", ""),
            "user_defined_metadata": dict(meta.get("userDefinedMetadata") or {}), "default_function": ""}


def bundle_metadata(path):
    """metadata.json of a .mlmodelc bundle (its first entry), {} elsewhere."""
    file = os.path.join(os.fspath(path), "metadata.json")
    if not os.path.isfile(file):
        return {}
    try:
        with open(file, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}  # the model itself loaded: its description is an extra
    if isinstance(data, list) and data and isinstance(data[0], dict):
        return data[0]
    return data if isinstance(data, dict) else {}
