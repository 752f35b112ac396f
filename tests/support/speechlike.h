// A deterministic speech-like test signal for voice-activity models: silence,
// a synthetic voiced vowel (glottal pulses through formant resonators under a
// syllabic envelope), silence. No audio files are needed.
#pragma once
#include <cstddef>
#include <vector>

namespace milrt::test {

struct SpeechlikeSignal {
  std::vector<float> samples;
  int sample_rate = 16000;
  size_t vowel_begin = 0;  // first sample of the vowel
  size_t vowel_end = 0;    // one past its last sample
};

// `lead_s` seconds of silence, `vowel_s` seconds of vowel, `trail_s` seconds of
// silence at `sample_rate`; the whole signal is scaled to peak `peak`.
//
// The vowel: a unit impulse each time a phase accumulator at pitch
// 130 + 10·sin(2π·3·t) Hz wraps, plus uniform noise 0.02·(u − 0.5) from a
// fixed-seed generator; that excitation drives three parallel two-pole
// resonators (formants 700/130, 1220/70, 2600/160 Hz as centre/bandwidth),
// whose sum is multiplied by the 4 Hz envelope 0.5·(1 − cos(2π·4·t)).
// t counts from the vowel's start, so the envelope starts and ends at zero.
// Silence is exactly zero.
SpeechlikeSignal make_speechlike(double lead_s = 0.5, double vowel_s = 1.0, double trail_s = 0.5,
                                 int sample_rate = 16000, double peak = 0.5);

}  // namespace milrt::test
