#include "colors.hpp"

#include <algorithm>
#include <array>
#include <cmath>

namespace kvgui::colors {

QRgb viridis(double x) {
  // matplotlib's viridis at 0, 0.1, ..., 1.
  static constexpr std::array<QRgb, 11> stops = {0x440154, 0x482475, 0x414487, 0x355f8d, 0x2a788e, 0x21918c,
                                                 0x22a884, 0x44bf70, 0x7ad151, 0xbddf26, 0xfde725};
  x = std::clamp(std::isfinite(x) ? x : 0.0, 0.0, 1.0) * 10.0;
  const int i = std::min(9, static_cast<int>(x));
  const double f = x - i;
  const QRgb a = stops[static_cast<size_t>(i)], b = stops[static_cast<size_t>(i) + 1];
  auto mix = [f](int p, int q) { return static_cast<int>(std::lround(p + (q - p) * f)); };
  return qRgb(mix(qRed(a), qRed(b)), mix(qGreen(a), qGreen(b)), mix(qBlue(a), qBlue(b)));
}

double attention_position(double value) {
  if (!(value > kAttentionFloor)) return 0.0;
  return std::clamp(std::log10(value / kAttentionFloor) / -std::log10(kAttentionFloor), 0.0, 1.0);
}

QRgb attention(double value) { return viridis(attention_position(value)); }

QRgb dimmed(QRgb colour) {
  // 80% towards a light grey: the hue stays faintly visible, the cell reads as "gone".
  auto mix = [](int c) { return (c + 4 * 232) / 5; };
  return qRgb(mix(qRed(colour)), mix(qGreen(colour)), mix(qBlue(colour)));
}

QColor text_on(QColor background) {
  const double luminance = 0.299 * background.red() + 0.587 * background.green() + 0.114 * background.blue();
  return luminance > 150 ? QColor(20, 20, 20) : QColor(250, 250, 250);
}

QColor series(int index) {
  // Tableau 10.
  static constexpr std::array<QRgb, 10> palette = {0x1f77b4, 0xff7f0e, 0x2ca02c, 0xd62728, 0x9467bd,
                                                   0x8c564b, 0xe377c2, 0x7f7f7f, 0xbcbd22, 0x17becf};
  return QColor(palette[static_cast<size_t>(index) % palette.size()]);
}

}  // namespace kvgui::colors
