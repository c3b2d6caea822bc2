// The line plots' series styles and legend (sim/plot/line_plot.cpp): sixteen series get
// sixteen different colour, marker and line-style triples, and the legend draws each entry as
// a line in the series' colour and dash with its marker on it, in the series' order.
#include <gtest/gtest.h>

#include <QApplication>
#include <QImage>
#include <cstdlib>
#include <set>
#include <tuple>

#include "kvsim/plot/plot.hpp"

namespace {

kvsim::LinePlot sixteen_series(bool with_points) {
  kvsim::LinePlot plot;
  plot.y_min = 0, plot.y_max = 1;
  for (int i = 0; i < 16; ++i) {
    kvsim::PlotSeries series;
    series.name = "";  // no text: the legend's only pixels are its swatches
    if (with_points) series.points = {{10.0, 0.5 + i * 0.02}, {50.0, 0.6 + i * 0.02}};
    plot.series.push_back(series);
  }
  return plot;
}

TEST(PlotStyle, SixteenSeriesGetSixteenStyles) {
  const kvsim::LinePlot plot = sixteen_series(true);
  std::set<std::tuple<unsigned, int, int>> styles;
  for (size_t i = 0; i < plot.series.size(); ++i) {
    const kvsim::PlotStyle s = kvsim::series_style(plot.series, i);
    styles.insert({s.rgb, static_cast<int>(s.marker), static_cast<int>(s.dash)});
    EXPECT_NE(s.dash, kvsim::PlotDash::dash) << "the plain dash is kept for reference lines";
  }
  EXPECT_EQ(styles.size(), 16u);
  // Neighbours differ in all three, so no two adjacent lines share a colour, marker or dash.
  for (size_t i = 1; i < plot.series.size(); ++i) {
    const kvsim::PlotStyle a = kvsim::series_style(plot.series, i - 1), b = kvsim::series_style(plot.series, i);
    EXPECT_TRUE(a.rgb != b.rgb && a.marker != b.marker && a.dash != b.dash) << i;
  }
}

TEST(PlotStyle, ReferenceLinesAreDashedInBlackOrTheirSeriesColour) {
  std::vector<kvsim::PlotSeries> series(3);
  series[1].dashed = true;
  series[2].dashed = true;
  series[2].colour_of = 0;
  EXPECT_EQ(kvsim::series_style(series, 1).rgb, 0x000000u);
  EXPECT_EQ(kvsim::series_style(series, 1).dash, kvsim::PlotDash::dash);
  EXPECT_EQ(kvsim::series_style(series, 2).rgb, kvsim::series_style(series, 0).rgb);
}

QRgb rgb_of(unsigned rgb) { return qRgb(static_cast<int>(rgb >> 16), static_cast<int>((rgb >> 8) & 255), static_cast<int>(rgb & 255)); }
bool near(QRgb a, QRgb b) {
  return std::abs(qRed(a) - qRed(b)) <= 10 && std::abs(qGreen(a) - qGreen(b)) <= 10 && std::abs(qBlue(a) - qBlue(b)) <= 10;
}

TEST(PlotStyle, LegendShowsEachSeriesLineAndMarker) {
  // No points: the plot area holds only the axes and grid, and the legend (right of it) one
  // swatch per series. Found as bands of rows holding one of the series' colours.
  const kvsim::LinePlot plot = sixteen_series(false);
  const std::string png = kvsim::draw_line_plot(plot, kvsim::PlotFormat::png);
  QImage image;
  ASSERT_TRUE(image.loadFromData(reinterpret_cast<const uchar*>(png.data()), static_cast<int>(png.size()), "PNG"));
  EXPECT_EQ(image.width(), 8 * 150);  // 8 x 5 inches at 150 dpi
  EXPECT_EQ(image.height(), 5 * 150);
  std::vector<QRgb> colours;
  for (size_t i = 0; i < plot.series.size(); ++i) colours.push_back(rgb_of(kvsim::series_style(plot.series, i).rgb));
  auto which = [&](QRgb pixel) {
    for (size_t c = 0; c < colours.size(); ++c)
      if (near(pixel, colours[c])) return static_cast<int>(c % 10);  // a colour, not yet a series
    return -1;
  };
  const int x0 = image.width() * 9 / 10;  // right of the plot area and its tick labels
  struct Band {
    int top = 0, bottom = 0;
  };
  std::vector<Band> bands;
  for (int y = 0; y < image.height(); ++y) {
    bool any = false;
    for (int x = x0; x < image.width() && !any; ++x) any = which(image.pixel(x, y)) >= 0;
    if (!any) continue;
    if (bands.empty() || bands.back().bottom < y - 1) bands.push_back({y, y});
    bands.back().bottom = y;
  }
  ASSERT_EQ(bands.size(), 16u) << "one legend entry per series";
  for (size_t i = 0; i < bands.size(); ++i) {
    const QRgb colour = colours[i];
    // Columns of this entry's colour, and how tall each is: the marker is taller than the line.
    std::vector<int> height(static_cast<size_t>(image.width()), 0);
    for (int y = bands[i].top; y <= bands[i].bottom; ++y)
      for (int x = x0; x < image.width(); ++x) height[static_cast<size_t>(x)] += near(image.pixel(x, y), colour);
    int left = -1, right = -1, tallest = 0;
    for (int x = x0; x < image.width(); ++x)
      if (height[static_cast<size_t>(x)] > 0) {
        if (left < 0) left = x;
        right = x;
        tallest = std::max(tallest, height[static_cast<size_t>(x)]);
      }
    ASSERT_GE(left, 0) << "entry " << i << " lacks its colour";
    // The line: thin; the marker: at least twice as tall, in the middle; the line is longer.
    int line_height = tallest, marker_left = right, marker_right = left;
    for (int x = left; x <= right; ++x) {
      const int h = height[static_cast<size_t>(x)];
      if (h > 0) line_height = std::min(line_height, h);
      if (h * 2 > tallest) marker_left = std::min(marker_left, x), marker_right = std::max(marker_right, x);
    }
    EXPECT_GE(tallest, 2 * line_height + 2) << "entry " << i << " shows no marker";
    EXPECT_GT(right - left, 2 * (marker_right - marker_left)) << "entry " << i << " shows no line beside its marker";
    // The dash: runs of the colour along the line left of the marker, over the 70% of it that
    // is clear of the marker's rim; solid gives one.
    int runs = 0;
    bool in = false;
    for (int x = left; x <= left + (marker_left - left) * 7 / 10; ++x) {
      const bool on = height[static_cast<size_t>(x)] > 0;
      runs += on && !in;
      in = on;
    }
    const bool solid = kvsim::series_style(plot.series, i).dash == kvsim::PlotDash::solid;
    if (solid) {
      EXPECT_EQ(runs, 1) << "entry " << i << " should be solid";
    } else {
      EXPECT_GE(runs, 2) << "entry " << i << " should be dashed or dotted";
    }
  }
}

TEST(PlotStyle, SizeAndDpiSetThePixels) {
  kvsim::LinePlot plot = sixteen_series(true);
  plot.layout.width_in = 3.5, plot.layout.height_in = 2.5, plot.layout.dpi = 300;
  const std::string png = kvsim::draw_line_plot(plot, kvsim::PlotFormat::png);
  QImage image;
  ASSERT_TRUE(image.loadFromData(reinterpret_cast<const uchar*>(png.data()), static_cast<int>(png.size()), "PNG"));
  EXPECT_EQ(image.width(), 1050);
  EXPECT_EQ(image.height(), 750);
  EXPECT_NEAR(image.dotsPerMeterX() * 0.0254, 300, 1);
}

}  // namespace
