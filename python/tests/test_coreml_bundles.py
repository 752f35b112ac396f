"""The real Core ML bundles of ../shared/testdata through MLModel, against
the reference executor (an interpreter that shares no code with the
compiled plans) and, for the small fluidaudio programs, against NumPy."""
import numpy as np
import pytest

import milrt
from helpers import require_shared

SILERO_32MS = ["silero-vad-unified-v6.0.0", "unified_int8", "unified_palette_4bit"]


def speechlike(chunks, rng):
    """Silence, a voiced vowel-like tone with harmonics, silence (16 kHz)."""
    t = np.arange(chunks * 512) / 16000.0
    voiced = sum(np.sin(2 * np.pi * 140 * k * t) / k for k in range(1, 8))
    envelope = (t > 0.1) & (t < 0.4)
    return (0.3 * voiced * envelope + 0.003 * rng.standard_normal(t.size)).astype(np.float32)


def stream(predict, audio):
    """Runs 32 ms chunks (64 samples of context + 512) with the LSTM state fed
    back; returns each chunk's inputs and outputs."""
    h = np.zeros((1, 128), np.float32)
    c = np.zeros((1, 128), np.float32)
    context = np.zeros(64, np.float32)
    steps = []
    for i in range(0, audio.size, 512):
        chunk = audio[i:i + 512]
        inputs = {"audio_input": np.concatenate([context, chunk])[None, :], "hidden_state": h, "cell_state": c}
        out = predict(inputs)
        h, c, context = out["new_hidden_state"], out["new_cell_state"], chunk[-64:]
        steps.append((inputs, out))
    return steps


@pytest.mark.parametrize("name", SILERO_32MS)
def test_silero_streams_as_the_reference_executor(name):
    path = require_shared() / "testdata/coreml/silero-vad" / f"{name}.mlmodelc"
    audio = speechlike(16, np.random.default_rng(0))
    model = milrt.models.MLModel(path)
    reference = milrt.load(path)
    # The reference's stream; the plan runs each step on the same inputs, so
    # that differences do not compound through the fed-back state.
    steps = stream(reference.run_reference, audio)
    probabilities = []
    for inputs, want in steps:
        got = model.predict(inputs)
        probabilities.append(got["vad_output"].item())
        for key, tolerance in TOLERANCE.items():
            assert got[key].dtype == np.float32
            np.testing.assert_allclose(got[key], want[key], atol=tolerance, rtol=0, err_msg=f"{name} {key}")
    probabilities = np.array(probabilities)
    assert probabilities[4:12].max() > 0.5 > probabilities[:2].max()  # speech in the vowel, not before


# fp32 plans against the reference's fp16 rounding after every op, largest
# differences measured over these 16 steps: vad_output 4.7e-4, hidden state
# 3.1e-3, cell state 1.2e-2 (its values reach 6, where an fp16 ulp is 3.9e-3).
TOLERANCE = {"vad_output": 2e-3, "new_hidden_state": 1e-2, "new_cell_state": 3e-2}


def test_silero_with_fp16_numerics_is_closer_to_the_reference():
    path = require_shared() / "testdata/coreml/silero-vad/unified_int8.mlmodelc"
    steps = stream(milrt.load(path).run_reference, speechlike(16, np.random.default_rng(1)))
    fp32, fp16 = milrt.models.MLModel(path), milrt.models.MLModel(path, numerics="fp16")
    for key in TOLERANCE:
        d32 = max(np.abs(fp32.predict(inputs)[key] - want[key]).max() for inputs, want in steps)
        d16 = max(np.abs(fp16.predict(inputs)[key] - want[key]).max() for inputs, want in steps)
        assert d16 <= d32, key   # measured: 1.2e-4 against 1.2e-2 on the cell state


def test_silero_metadata_from_the_bundle():
    path = require_shared() / "testdata/coreml/silero-vad/silero-vad-unified-v6.0.0.mlmodelc"
    model = milrt.models.MLModel(path)
    assert model.user_defined_metadata["com.github.apple.coremltools.version"] == "9.0b1"
    assert model.version == "6.0.0"
    assert model.input_description["audio_input"].shape == (1, 576)


def test_fluidaudio_argmax_and_token_duration_against_numpy():
    base = require_shared() / "testdata/coreml/fluidaudio-small"
    rng = np.random.default_rng(2)
    logits = rng.standard_normal(1030).astype(np.float32) * 4
    l16 = logits.astype(np.float16)  # the models take fp16: inputs round first
    out = milrt.models.MLModel(base / "Argmax.mlmodelc").predict({"logits": logits[:1025]})
    assert out["index"].dtype == np.int32 and out["score"].dtype == np.float16
    assert out["index"].tolist() == [int(np.argmax(l16[:1025]))]
    assert out["score"].tolist() == [l16[:1025].max()]
    out = milrt.models.MLModel(base / "TokenDurationPrediction.mlmodelc").predict({"logits": logits})
    assert out["token_id"].tolist() == [int(np.argmax(l16[:1025]))]
    assert out["duration_index"].tolist() == [int(np.argmax(l16[1025:]))]


def test_fluidaudio_transpose_with_flexible_shapes():
    model = milrt.models.MLModel(require_shared() / "testdata/coreml/fluidaudio-small/TransposeEncoder.mlmodelc")
    assert model.input_description["x"].shape == (1, None, None)
    for shape in [(1, 3, 5), (1, 64, 2), (1, 3, 5)]:
        x = np.random.default_rng(3).standard_normal(shape)
        out = model.predict({"x": x})["var_4"]
        np.testing.assert_array_equal(out, x.astype(np.float16).transpose(0, 2, 1))
    assert len(model._plans) == 2


def test_mlpackage_twin_gives_the_bundles_outputs():
    base = require_shared() / "testdata/coreml"
    package = base / "silero-vad-mlpackage/silero-vad-unified-v6.0.0.mlpackage"
    model = milrt.models.MLModel(package)
    bundle = milrt.models.MLModel(base / "silero-vad/silero-vad-unified-v6.0.0.mlmodelc")
    # The package's description (protobuf) and the bundle's metadata.json agree.
    assert model.user_defined_metadata == bundle.user_defined_metadata
    assert model.user_defined_metadata["com.github.apple.coremltools.version"] == "9.0b1"
    assert (model.author, model.version) == (bundle.author, bundle.version)
    assert model.input_description == bundle.input_description
    audio = speechlike(4, np.random.default_rng(4))
    got = stream(model.predict, audio)
    want = stream(bundle.predict, audio)
    for (_, g), (_, w) in zip(got, want):
        for key in g:
            np.testing.assert_array_equal(g[key], w[key], err_msg=key)
