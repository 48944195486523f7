#include "sim/plot_axis.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "absl/strings/str_format.h"
#include "sim/report_format.h"

namespace graphbandit::sim {

double Axis::Fraction(double v) const {
  if (log) return (std::log10(v) - std::log10(lo)) / (std::log10(hi) - std::log10(lo));
  return (v - lo) / (hi - lo);
}

Axis NiceAxis(double lo, double hi, bool extend) {
  if (!std::isfinite(lo)) lo = 0;
  if (!std::isfinite(hi)) hi = lo + 1;
  if (!(hi > lo)) hi = lo + std::max(1.0, std::abs(lo));
  constexpr double kEps = 1e-9;
  const int e_start = static_cast<int>(std::floor(std::log10(hi - lo))) - 2;
  static constexpr double kMantissas[] = {1, 2, 2.5, 5};
  Axis axis;
  for (int e = e_start;; ++e) {
    for (const double m : kMantissas) {
      // step = m * 10^e, kept as m and 10^|e| so that tick values come out as exact as possible.
      const double scale = std::pow(10.0, std::abs(e));
      const double step = e >= 0 ? m * scale : m / scale;
      if (std::max(std::abs(lo), std::abs(hi)) / step > 1e15) continue;  // tick indices overflow
      auto value = [&](int64_t k) { return e >= 0 ? k * m * scale : k * m / scale; };
      int64_t k0, k1;
      if (extend) {
        k0 = static_cast<int64_t>(std::floor(lo / step + kEps));
        k1 = static_cast<int64_t>(std::ceil(hi / step - kEps));
        if (k1 - k0 > 7) continue;
        axis.lo = value(k0);
        axis.hi = value(k1);
      } else {
        k0 = static_cast<int64_t>(std::ceil(lo / step - kEps));
        k1 = static_cast<int64_t>(std::floor(hi / step + kEps));
        if (k1 - k0 > 7) continue;
        axis.lo = lo;
        axis.hi = hi;
      }
      for (int64_t k = k0; k <= k1; ++k) axis.ticks.push_back(value(k));
      return axis;
    }
  }
}

Axis LogAxis(double lo, double hi) {
  Axis axis;
  axis.log = true;
  if (!(lo > 0) || !std::isfinite(lo)) lo = 1;
  if (!(hi >= lo) || !std::isfinite(hi)) hi = lo;
  int e0 = static_cast<int>(std::floor(std::log10(lo) + 1e-9));
  int e1 = static_cast<int>(std::ceil(std::log10(hi) - 1e-9));
  if (e1 <= e0) {
    --e0;
    ++e1;
  }
  axis.lo = std::pow(10.0, e0);
  axis.hi = std::pow(10.0, e1);
  const int decades = e1 - e0;
  const int stride = decades > 8 ? (decades + 6) / 7 : 1;
  for (int e = e0; e <= e1; ++e) {
    if ((e - e0) % stride == 0) axis.ticks.push_back(std::pow(10.0, e));
    if (decades <= 2 && e < e1) {
      const double scale = std::pow(10.0, std::abs(e));
      axis.ticks.push_back(e >= 0 ? 2 * scale : 2 / scale);
      axis.ticks.push_back(e >= 0 ? 5 * scale : 5 / scale);
    }
  }
  return axis;
}

std::string FormatTick(double v) {
  if (v == 0) return "0";
  if (!std::isfinite(v)) return report_internal::ShortestDouble(v);
  const double a = std::abs(v);
  if (a < 1e-4 || a >= 1e15) return absl::StrFormat("%.3g", v);
  struct Suffix {
    double scale;
    const char* suffix;
  };
  static constexpr Suffix kSuffixes[] = {{1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "k"}};
  for (const Suffix& s : kSuffixes) {
    if (a >= s.scale) return absl::StrFormat("%.10g%s", v / s.scale, s.suffix);
  }
  return absl::StrFormat("%.10g", v);
}

}  // namespace graphbandit::sim
