#pragma once
// kvsim-gui's window: controls and the layer x head overview on the left, the attention
// heatmap with evictions in the middle, charts on the right, the token strip below. Opens
// traces from the file dialog, by drag and drop or from the command line, remembers recent
// files, and exports the views as PNG and the survival table as CSV.
#include <QDialog>
#include <QMainWindow>
#include <QPointer>
#include <QString>

class QMenu;
class QScrollArea;
class QSplitter;

namespace kvgui {

class ChartsPanel;
class ControlsPanel;
class HeatmapView;
class OverviewGrid;
class Session;
class TokenStrip;

class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  explicit MainWindow(QWidget* parent = nullptr);

  // Opens a trace; false with the reader's message on failure (no dialog).
  bool openFile(const QString& path, QString* error = nullptr);
  // Writes every view as one PNG / the shown layer's survival table as CSV; false with a
  // message on failure.
  bool exportViews(const QString& path, QString* error = nullptr);
  bool exportHeatmap(const QString& path, QString* error = nullptr);
  bool exportSurvival(const QString& path, QString* error = nullptr);
  // The real trace bundled with kvsim (data/traces), where the build found it.
  static QString exampleTrace();
  // Waits until every view has caught up with the settings (tests, exports).
  void waitIdle();
  // Computing the rest of the budget slider's range ahead (on by default; off for tests of
  // the neighbours alone), and waiting for it (benchmarks, tests).
  void setWholeRangeAhead(bool on);
  void waitAhead();
  // Whether every view shows the current settings (the session's replay, the overview, the
  // shown charts), whatever is still being computed ahead.
  bool viewsAreCurrent() const;
  // Forgets every replay made so far of `policy` (a label; every policy when empty) and what
  // the overview and the budget chart computed (benchmarks time the computation, not the
  // lookup).
  void forgetResults(const std::string& policy = {});

  Session* session() const { return session_; }
  ControlsPanel* controls() const { return controls_; }
  HeatmapView* heatmap() const { return heatmap_; }
  TokenStrip* tokens() const { return tokens_; }
  OverviewGrid* overview() const { return overview_; }
  // View > Overview in a window: the grid at a size where every cell shows its value.
  void showOverviewWindow();
  QDialog* overviewWindow() const { return overview_window_; }
  ChartsPanel* charts() const { return charts_; }

 protected:
  void dragEnterEvent(QDragEnterEvent* event) override;
  void dropEvent(QDropEvent* event) override;

 private:
  void buildMenus();
  void openDialog();
  void openWithMessage(const QString& path);
  void rememberRecent(const QString& path);
  void fillRecentMenu();
  void fitLeftColumn();
  void saveDialog(const QString& title, const QString& filter, const QString& suffix,
                  bool (MainWindow::*write)(const QString&, QString*));
  void showStatus();

  Session* session_;
  ControlsPanel* controls_;
  OverviewGrid* overview_;
  QScrollArea* left_scroll_;
  QWidget* overview_box_;
  QSplitter* left_split_;
  QPointer<QDialog> overview_window_;  // View > Overview in a window, while it is open
  HeatmapView* heatmap_;
  ChartsPanel* charts_;
  TokenStrip* tokens_;
  QMenu* recent_ = nullptr;
};

}  // namespace kvgui
