#include "support/speechlike.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace milrt::test {
namespace {

// A fixed 64-bit LCG (Knuth's MMIX constants): the same numbers on every
// platform, unlike std::uniform_real_distribution.
class Lcg {
 public:
  explicit Lcg(uint64_t seed) : state_(seed) {}
  double uniform() {  // in [0, 1)
    state_ = state_ * 6364136223846793005ULL + 1442695040888963407ULL;
    return double(state_ >> 11) * (1.0 / 9007199254740992.0);
  }

 private:
  uint64_t state_;
};

// y[n] = x[n] + a1·y[n−1] + a2·y[n−2], poles at radius exp(−π·bw/sr) and
// angle 2π·fc/sr.
std::vector<double> resonate(const std::vector<double>& x, double fc, double bw, double sr) {
  const double pi = std::acos(-1.0);
  double r = std::exp(-pi * bw / sr);
  double a1 = 2 * r * std::cos(2 * pi * fc / sr);
  double a2 = -r * r;
  std::vector<double> y(x.size());
  double y1 = 0, y2 = 0;
  for (size_t n = 0; n < x.size(); ++n) {
    y[n] = x[n] + a1 * y1 + a2 * y2;
    y2 = y1;
    y1 = y[n];
  }
  return y;
}

std::vector<double> vowel(size_t n, double sr) {
  const double pi = std::acos(-1.0);
  Lcg rng(12345);
  std::vector<double> source(n);
  double phase = 0;
  for (size_t i = 0; i < n; ++i) {
    double t = double(i) / sr;
    phase += (130 + 10 * std::sin(2 * pi * 3 * t)) / sr;
    double pulse = 0;
    if (phase >= 1) {
      phase -= 1;
      pulse = 1;
    }
    source[i] = pulse + 0.02 * (rng.uniform() - 0.5);
  }
  const double formants[3][2] = {{700, 130}, {1220, 70}, {2600, 160}};
  std::vector<double> out(n, 0.0);
  for (const auto& f : formants) {
    std::vector<double> y = resonate(source, f[0], f[1], sr);
    for (size_t i = 0; i < n; ++i) out[i] += y[i];
  }
  for (size_t i = 0; i < n; ++i) out[i] *= 0.5 * (1 - std::cos(2 * pi * 4 * double(i) / sr));
  return out;
}

}  // namespace

SpeechlikeSignal make_speechlike(double lead_s, double vowel_s, double trail_s, int sample_rate,
                                 double peak) {
  const double sr = sample_rate;
  size_t lead = size_t(std::lround(lead_s * sr));
  size_t voiced = size_t(std::lround(vowel_s * sr));
  size_t trail = size_t(std::lround(trail_s * sr));
  std::vector<double> v = vowel(voiced, sr);
  double max_abs = 0;
  for (double x : v) max_abs = std::max(max_abs, std::fabs(x));
  double gain = max_abs > 0 ? peak / max_abs : 0;

  SpeechlikeSignal s;
  s.sample_rate = sample_rate;
  s.vowel_begin = lead;
  s.vowel_end = lead + voiced;
  s.samples.assign(lead + voiced + trail, 0.0f);
  for (size_t i = 0; i < voiced; ++i) s.samples[lead + i] = float(v[i] * gain);
  return s;
}

}  // namespace milrt::test
