#pragma once
// The sequence's text as a flow of token boxes, each shaded by its state at the step cursor:
// still cached (blue, darker = more attention at that step), evicted (grey, struck through),
// or not generated yet (faint). The sequence's spans shade a band under their tokens, a colour
// per kind (a token of several kinds: a stripe each). Click selects a token, Ctrl+click adds
// one, Shift+click a range; a double click moves the step cursor to the token.
#include <QRect>
#include <QString>
#include <QWidget>
#include <cstdint>
#include <vector>

class QPainter;

namespace kvgui {

class Session;

class TokenFlow : public QWidget {
  Q_OBJECT
 public:
  enum class State { future, cached, evicted };

  explicit TokenFlow(Session* session, QWidget* parent = nullptr);
  // The state drawn for `position` at the step cursor.
  State state(int64_t position) const;
  // Where the token is drawn (widget coordinates); empty if out of range.
  QRect tokenRect(int64_t position) const;
  bool hasHeightForWidth() const override { return true; }
  int heightForWidth(int width) const override;
  QSize sizeHint() const override { return {800, 160}; }

 signals:
  void layoutChanged();

 protected:
  void paintEvent(QPaintEvent* event) override;
  void resizeEvent(QResizeEvent* event) override;
  void mousePressEvent(QMouseEvent* event) override;
  void mouseDoubleClickEvent(QMouseEvent* event) override;
  bool event(QEvent* event) override;

 private:
  void relayout();
  int layoutFor(int width, std::vector<QRect>* boxes) const;
  int64_t tokenAt(QPoint point) const;
  QColor fill(int64_t position, State state) const;
  void paintSpans(QPainter& painter, size_t i) const;
  QString spansAt(int64_t position) const;  // the tooltip's lines on the spans holding it

  Session* session_;
  std::vector<QRect> boxes_;
  int64_t anchor_ = -1;  // Shift+click ranges start here
};

}  // namespace kvgui
