#pragma once
// The colours every view shares: attention on a log scale with viridis (perceptually
// uniform, readable in grey), retention on a linear scale, and the dimming of what the
// cache no longer holds. Display only.
#include <QColor>
#include <QRgb>

namespace kvgui::colors {

// Attention values below this are drawn with the lowest colour.
inline constexpr double kAttentionFloor = 1e-4;

QRgb viridis(double x);  // x in [0, 1]
// Position of an attention value on the log scale [kAttentionFloor, 1], in [0, 1].
double attention_position(double value);
QRgb attention(double value);
// An evicted cell: the colour washed out towards light grey.
QRgb dimmed(QRgb colour);
// Empty area above the diagonal (keys after the query).
inline constexpr QRgb kNoKey = 0xffffffff;
// Text that stays readable on `background`.
QColor text_on(QColor background);
// Colours of the policies in charts, by index.
QColor series(int index);

}  // namespace kvgui::colors
