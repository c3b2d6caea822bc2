#include "main_window.hpp"

#include <QAction>
#include <QApplication>
#include <QDragEnterEvent>
#include <QDropEvent>
#include <QDialog>
#include <QFileDialog>
#include <QFileInfo>
#include <QGroupBox>
#include <QMenuBar>
#include <QMessageBox>
#include <QMimeData>
#include <QSaveFile>
#include <QScreen>
#include <QScrollArea>
#include <QScrollBar>
#include <QSettings>
#include <QSplitter>
#include <QStatusBar>
#include <QToolButton>
#include <QVBoxLayout>
#include <algorithm>

#include "charts/charts_panel.hpp"
#include "controls_panel.hpp"
#include "views/heatmap_view.hpp"
#include "kvsim/core/data_dir.hpp"
#include "kvsim/replay/report.hpp"
#include "kvtrace/reader.hpp"
#include "views/overview_grid.hpp"
#include "session.hpp"
#include "views/token_strip.hpp"

namespace kvgui {
namespace {

constexpr int kMaxRecent = 8;
const char* const kRecentKey = "recentFiles";

}  // namespace

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent), session_(new Session(this)) {
  setWindowTitle(tr("kvsim-gui"));
  setAcceptDrops(true);

  controls_ = new ControlsPanel(session_);
  overview_ = new OverviewGrid(session_);
  auto* overview_box = new QGroupBox(tr("4. Overview: every layer \u00d7 head"));
  overview_box_ = overview_box;
  auto* overview_layout = new QVBoxLayout(overview_box);
  overview_layout->setContentsMargins(2, 2, 2, 2);
  overview_layout->addWidget(overview_);
  // The controls over the overview, the split between them the user's to move: the
  // controls scroll when the overview takes the height that 32 layers need.
  left_scroll_ = new QScrollArea;
  left_scroll_->setWidget(controls_);
  left_scroll_->setWidgetResizable(true);
  left_scroll_->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  left_scroll_->setFrameShape(QFrame::NoFrame);
  auto* left = left_split_ = new QSplitter(Qt::Vertical);
  left->setObjectName("leftSplitter");
  left->setChildrenCollapsible(false);
  left->addWidget(left_scroll_);
  left->addWidget(overview_box);
  left->setStretchFactor(0, 0);
  left->setStretchFactor(1, 1);
  fitLeftColumn();

  heatmap_ = new HeatmapView(session_);
  charts_ = new ChartsPanel(session_);
  tokens_ = new TokenStrip(session_);

  // Controls full height on the left; heatmap and charts side by side over the token strip.
  auto* views = new QSplitter(Qt::Horizontal);
  views->addWidget(heatmap_);
  views->addWidget(charts_);
  views->setStretchFactor(0, 3);
  views->setStretchFactor(1, 2);
  views->setSizes({720, 520});
  auto* right = new QSplitter(Qt::Vertical);
  right->addWidget(views);
  right->addWidget(tokens_);
  right->setStretchFactor(0, 4);
  right->setStretchFactor(1, 1);
  right->setSizes({700, 240});
  auto* main = new QSplitter(Qt::Horizontal);
  main->addWidget(left);
  main->addWidget(right);
  main->setStretchFactor(0, 0);
  main->setStretchFactor(1, 1);
  main->setSizes({380, 1200});
  setCentralWidget(main);

  buildMenus();
  connect(controls_, &ControlsPanel::openRequested, this, &MainWindow::openDialog);
  connect(session_, &Session::replayed, this, &MainWindow::showStatus);
  connect(session_, &Session::failed, this, [this](const QString& message) { statusBar()->showMessage(message); });
  connect(session_, &Session::traceChanged, this, &MainWindow::fitLeftColumn);
  connect(controls_->engineToggle(), &QToolButton::toggled, this, &MainWindow::fitLeftColumn, Qt::QueuedConnection);
  statusBar()->showMessage(tr("Open a trace (Ctrl+O) or drop an .h5 file on the window."));
  // 1580 x 960 where the screen has room, else the screen (1366 x 768 laptops).
  const QSize room = screen() ? screen()->availableGeometry().size() : QSize(1580, 960);
  resize(std::min(1580, room.width()), std::min(960, room.height()));
}

// The controls' column is as wide as their widest line (the combo boxes fit their longest
// item) and the overview's smallest cells: nothing in it is cut off on the right.
void MainWindow::fitLeftColumn() {
  controls_->adjustSize();
  const int scrollbar = left_scroll_->verticalScrollBar()->sizeHint().width();
  left_scroll_->setMinimumWidth(std::max(310, controls_->minimumSizeHint().width() + scrollbar + 2));
  left_scroll_->setMinimumHeight(std::min(200, controls_->sizeHint().height()));
  // The overview as high as cells that show their values need, up to half the column; never
  // below its 8 px cells (the controls above then scroll).
  const int total = left_split_->height();
  if (total <= 0) return;
  const int overview =
      std::max(overview_box_->minimumSizeHint().height(), std::min(overview_box_->sizeHint().height(), total / 2));
  left_split_->setSizes({total - overview, overview});
}

void MainWindow::buildMenus() {
  QMenu* file = menuBar()->addMenu(tr("&File"));
  file->addAction(tr("&Open trace\u2026"), QKeySequence::Open, this, &MainWindow::openDialog);
  QAction* example =
      file->addAction(tr("Open the &bundled example trace"), this, [this]() { openWithMessage(exampleTrace()); });
  example->setEnabled(QFileInfo::exists(exampleTrace()));
  recent_ = file->addMenu(tr("Open &recent"));
  connect(recent_, &QMenu::aboutToShow, this, &MainWindow::fillRecentMenu);
  file->addSeparator();
  file->addAction(tr("Export all views as &PNG\u2026"), QKeySequence(tr("Ctrl+E")), this, [this]() {
    saveDialog(tr("Export all views as PNG"), tr("PNG images (*.png)"), "png", &MainWindow::exportViews);
  });
  file->addAction(tr("Export &heatmap as PNG\u2026"), this, [this]() {
    saveDialog(tr("Export the heatmap as PNG"), tr("PNG images (*.png)"), "png", &MainWindow::exportHeatmap);
  });
  file->addAction(tr("Export &survival table as CSV\u2026"), this, [this]() {
    saveDialog(tr("Export the survival table as CSV"), tr("CSV files (*.csv)"), "csv", &MainWindow::exportSurvival);
  });
  file->addSeparator();
  file->addAction(tr("&Quit"), QKeySequence::Quit, qApp, &QApplication::quit);
  QMenu* view = menuBar()->addMenu(tr("&View"));
  view->addAction(tr("Show the whole heatmap"), QKeySequence(tr("Ctrl+0")), this, [this]() { heatmap_->resetView(); });
  view->addAction(tr("Overview in a &window"), QKeySequence(tr("Ctrl+L")), this, &MainWindow::showOverviewWindow);
  QMenu* help = menuBar()->addMenu(tr("&Help"));
  help->addAction(tr("How to read the views"), this, [this]() {
    QMessageBox::information(
        this, tr("How to read the views"),
        tr("<p><b>Heatmap</b>: row t is the attention of query step t over the key positions 0..t (log colour). "
           "Cells of a token after the step the policy evicted it are washed out, so the columns that stay bright are "
           "the tokens that survive. Wheel: zoom; drag: pan; click: move the step cursor; double-click: everything.</p>"
           "<p><b>Token strip</b>: the cache at the step cursor. Blue tokens are cached (darker: more attention at "
           "that "
           "step), grey struck-through tokens were evicted. Click tokens to chart their attention.</p>"
           "<p><b>Budget</b>: at most B tokens stay cached between steps. Drag the slider and every view follows.</p>"
           "<p>All results are a <i>teacher-forced replay</i>: %1.</p>")
            .arg(QString::fromUtf8(kvsim::kTeacherForcedNote)));
  });
}

QString MainWindow::exampleTrace() {
  // The source tree's data/ from a build tree, the installation's share/kvsim once installed.
  return QString::fromStdString(kvsim::data_dir() + "/traces/stories15M-8x256.h5");
}

bool MainWindow::openFile(const QString& path, QString* error) {
  if (!session_->open(path, error)) return false;
  rememberRecent(QFileInfo(path).absoluteFilePath());
  setWindowTitle(tr("kvsim-gui \u2014 %1").arg(QFileInfo(path).fileName()));
  statusBar()->showMessage(tr("Opened %1").arg(path), 4000);
  return true;
}

void MainWindow::openWithMessage(const QString& path) {
  QString error;
  if (!openFile(path, &error)) QMessageBox::warning(this, tr("Cannot open the trace"), error);
}

void MainWindow::openDialog() {
  const QString path = QFileDialog::getOpenFileName(this, tr("Open a trace"), QString(),
                                                    tr("kvsim traces (*.h5 *.hdf5);;All files (*)"));
  if (!path.isEmpty()) openWithMessage(path);
}

void MainWindow::rememberRecent(const QString& path) {
  QSettings settings;
  QStringList files = settings.value(kRecentKey).toStringList();
  files.removeAll(path);
  files.prepend(path);
  while (files.size() > kMaxRecent) files.removeLast();
  settings.setValue(kRecentKey, files);
}

void MainWindow::fillRecentMenu() {
  recent_->clear();
  const QStringList files = QSettings().value(kRecentKey).toStringList();
  for (const QString& path : files)
    recent_->addAction(QFileInfo(path).fileName() + "  \u2014  " + QFileInfo(path).absolutePath(), this,
                       [this, path]() { openWithMessage(path); });
  if (files.isEmpty()) recent_->addAction(tr("(none yet)"))->setEnabled(false);
}

void MainWindow::dragEnterEvent(QDragEnterEvent* event) {
  if (event->mimeData()->hasUrls() && !event->mimeData()->urls().isEmpty() &&
      event->mimeData()->urls().front().isLocalFile())
    event->acceptProposedAction();
}

void MainWindow::dropEvent(QDropEvent* event) {
  const QList<QUrl> urls = event->mimeData()->urls();
  if (urls.isEmpty() || !urls.front().isLocalFile()) return;
  event->acceptProposedAction();
  openWithMessage(urls.front().toLocalFile());
}

void MainWindow::saveDialog(const QString& title, const QString& filter, const QString& suffix,
                            bool (MainWindow::*write)(const QString&, QString*)) {
  QString path = QFileDialog::getSaveFileName(this, title, QString(), filter);
  if (path.isEmpty()) return;
  if (QFileInfo(path).suffix().isEmpty()) path += "." + suffix;
  QString error;
  if ((this->*write)(path, &error))
    statusBar()->showMessage(tr("Wrote %1").arg(path), 5000);
  else
    QMessageBox::warning(this, title, error);
}

namespace {

bool save_image(const QImage& image, const QString& path, QString* error) {
  QSaveFile file(path);
  if (file.open(QIODevice::WriteOnly) && image.save(&file, "PNG") && file.commit()) return true;
  if (error) *error = QObject::tr("%1: cannot write the image (%2)").arg(path, file.errorString());
  return false;
}

}  // namespace

// The layer x head overview at a size where every cell shows its value (32 layers x 32 heads
// and more): a second OverviewGrid on the same session, in a window of its own.
void MainWindow::showOverviewWindow() {
  if (!overview_window_) {
    overview_window_ = new QDialog(this);
    overview_window_->setAttribute(Qt::WA_DeleteOnClose);
    overview_window_->setWindowTitle(tr("Overview: every layer \u00d7 head"));
    auto* layout = new QVBoxLayout(overview_window_);
    layout->setContentsMargins(4, 4, 4, 4);
    auto* grid = new OverviewGrid(session_);
    grid->setObjectName("overviewWindowGrid");
    grid->setMetric(overview_->metric());
    layout->addWidget(grid);
    // Cells of 28 px where the main window has room, else as large as its size allows (it
    // fills a small screen): at 32 layers in a 1366 x 768 window 19 px, large enough for
    // the values.
    const std::shared_ptr<const kvtrace::TraceReader> reader = session_->reader();
    const int heads = reader ? reader->meta().n_heads : 6, layers = reader ? reader->meta().n_layers : 6;
    const QSize room = size();
    const int side =
        std::clamp(std::min((room.width() - 130) / heads, (room.height() - 150) / layers), OverviewGrid::kMinCell, 28);
    overview_window_->resize(std::min(room.width(), side * heads + 130), std::min(room.height(), side * layers + 150));
  }
  overview_window_->show();
  overview_window_->raise();
}

bool MainWindow::exportViews(const QString& path, QString* error) {
  waitIdle();
  return save_image(centralWidget()->grab().toImage(), path, error);
}

bool MainWindow::exportHeatmap(const QString& path, QString* error) {
  waitIdle();
  return save_image(heatmap_->grab().toImage(), path, error);
}

bool MainWindow::exportSurvival(const QString& path, QString* error) {
  waitIdle();
  const LayerReplay& replay = session_->replay();
  if (!replay.valid()) {
    if (error) *error = tr("No replay to export: open a trace first.");
    return false;
  }
  kvsim::ReplayResults results;
  kvsim::CellResult cell;
  cell.policy = replay.policy.label;
  cell.info = replay.policy.info;
  cell.budget = kvsim::Budget::parse(replay.budget_text.toStdString());
  cell.records = replay.records;
  size_t covered = 0;
  for (const auto& record : replay.records) covered += record.heads.size();
  if (static_cast<int>(covered) <
      session_->meta().n_heads)  // the views replayed one cache group: the table has them all
    cell.records = replayLayer(session_->rows(), session_->meta(), replay.policy, replay.budget, replay.options);
  results.cells.push_back(std::move(cell));
  results.mode = replay.mode;
  std::vector<std::vector<std::string>> text(static_cast<size_t>(replay.seq) + 1);
  text[static_cast<size_t>(replay.seq)] = session_->reader()->token_text(replay.seq);
  const std::string csv = kvsim::survival_csv(results, text);
  QSaveFile file(path);
  if (file.open(QIODevice::WriteOnly) &&
      file.write(csv.data(), static_cast<qint64>(csv.size())) == static_cast<qint64>(csv.size()) && file.commit())
    return true;
  if (error) *error = tr("%1: cannot write the table (%2)").arg(path, file.errorString());
  return false;
}

void MainWindow::waitIdle() {
  for (int round = 0; round < 4; ++round) {  // a finished job may start another view's job
    session_->waitIdle();
    overview_->waitIdle();
    charts_->waitIdle();
    QApplication::processEvents();
  }
}

void MainWindow::setWholeRangeAhead(bool on) { session_->setWholeRangeAhead(on); }

void MainWindow::waitAhead() {
  waitIdle();
  session_->waitAhead();
  waitIdle();
}

void MainWindow::forgetResults(const std::string& policy) {
  waitIdle();
  session_->forgetResults(policy);
}

bool MainWindow::viewsAreCurrent() const {
  return session_->replayIsCurrent() && overview_->isCurrent() && charts_->isCurrent();
}

void MainWindow::showStatus() {
  const LayerReplay& replay = session_->replay();
  if (!replay.valid()) return;
  const QString how = replay.cached
                          ? tr("layer %1 from the replays made before or ahead").arg(replay.layer)
                          : tr("replay of layer %1 took %2 ms").arg(replay.layer).arg(replay.replay_ms, 0, 'f', 1);
  statusBar()->showMessage(tr("%1 at B = %2: %3, %4 ms from the change to the view. Teacher-forced replay.")
                               .arg(QString::fromStdString(replay.policy.label))
                               .arg(replay.budget)
                               .arg(how)
                               .arg(replay.latency_ms, 0, 'f', 1));
}

}  // namespace kvgui
