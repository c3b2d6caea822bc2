#pragma once
// The main view: attention of the shown head, query step (down) x key position (across), on a
// log colour scale, with the selected policy's evictions drawn over it: a token's cells after
// its eviction step are dimmed, so what survives reads as the columns that stay bright. Wheel
// zooms, drag pans, a click moves the step cursor, a double click shows everything. Large
// traces are downsampled for display only (max over the cells a pixel covers).
#include <QImage>
#include <QPoint>
#include <QRectF>
#include <QWidget>
#include <cstdint>
#include <memory>
#include <vector>

namespace kvgui {

class Session;
class LayerRows;

class HeatmapView : public QWidget {
  Q_OBJECT
 public:
  explicit HeatmapView(Session* session, QWidget* parent = nullptr);

  // The rule the drawing uses: the shown head's cache no longer held `position` at `step`.
  bool isDimmed(int64_t step, int64_t position) const;
  // Key positions (x) by query steps (y) in view.
  void setViewRect(const QRectF& rect);
  void resetView();
  // Zooms by `factor` (> 1: in) keeping the data point `anchor` in place.
  void zoom(double factor, QPointF anchor);
  QSize sizeHint() const override { return {760, 720}; }
  QSize minimumSizeHint() const override { return {320, 300}; }

 protected:
  void paintEvent(QPaintEvent* event) override;
  void resizeEvent(QResizeEvent* event) override;
  void wheelEvent(QWheelEvent* event) override;
  void mousePressEvent(QMouseEvent* event) override;
  void mouseMoveEvent(QMouseEvent* event) override;
  void mouseReleaseEvent(QMouseEvent* event) override;
  void mouseDoubleClickEvent(QMouseEvent* event) override;
  void keyPressEvent(QKeyEvent* event) override;

 private:
  struct Level {
    int64_t size = 0;
    std::vector<float> cells;  // [size][size], max of the block; -1 above the diagonal
  };
  void rowsChanged();
  void buildLevels();
  void invalidate();
  void evictionsChanged();
  void renderBase();
  void renderImage();
  QRect plotRect() const;
  QPointF toData(QPointF pixel) const;
  QPointF toPixel(QPointF data) const;
  void showHover(QPoint pixel, QPoint global);
  void drawAxes(class QPainter& painter, const QRect& plot) const;
  void drawColourBar(class QPainter& painter, const QRect& plot) const;
  QString title() const;

  Session* session_;
  std::shared_ptr<const LayerRows> rows_;
  int head_ = -1;
  std::vector<Level> levels_;  // levels_[k]: 2^(k+1) cells per side of a block
  QRectF view_;
  QImage base_, image_;
  bool base_dirty_ = true, dirty_ = true;
  QPoint press_, last_;
  bool dragging_ = false;
};

}  // namespace kvgui
