// kvsim-gui's replays made ahead and kept: a budget-slider step to a
// neighbouring budget is served at once from what was computed in the background, and what
// was computed there is exactly what the engine gives for that setting.
#include <QApplication>
#include <QComboBox>
#include <QRadioButton>
#include <QSlider>
#include <QTest>
#include <atomic>
#include <future>
#include <numeric>

#include "charts/budget_chart.hpp"
#include "charts/charts_panel.hpp"
#include "charts/step_chart.hpp"
#include "controls_panel.hpp"
#include "job_runner.hpp"
#include "kvsim/core/summary.hpp"
#include "kvsim/replay/replay.hpp"
#include "kvtrace/reader.hpp"
#include "kvtrace/synth.hpp"
#include "layer_replay.hpp"
#include "main_window.hpp"
#include "policy_editor.hpp"
#include "replay_cache.hpp"
#include "scheduler.hpp"
#include "session.hpp"
#include "views/overview_grid.hpp"
#include "../support/temp_dir.hpp"

using kvgui::MainWindow;

namespace {

const QString kTrace = QStringLiteral(KVSIM_SOURCE_DIR "/data/traces/stories15M-8x256.h5");

// replay_rows over every head of (seq 0, layer) read straight from the file.
std::vector<kvsim::GroupRecord> engine_records(const QString& path, int layer, const std::string& policy,
                                               int64_t budget) {
  const kvtrace::TraceReader reader(path.toStdString());
  std::vector<int> heads(static_cast<size_t>(reader.meta().n_heads));
  std::iota(heads.begin(), heads.end(), 0);
  auto source = kvtrace::open_attention_source(reader, 0, layer, heads);
  kvsim::EngineOptions options;
  options.prompt_len = reader.sequence(0).prompt_len;
  return kvsim::replay_rows(*source, reader.meta().n_kv_heads, kvsim::choose_policy(policy), budget, options, {}, 0,
                            kvsim::RowsOrigin{0, layer, 0});
}

// The engine's record of the group holding `head`.
const kvsim::GroupRecord* record_of(const std::vector<kvsim::GroupRecord>& records, int head) {
  for (const auto& record : records)
    if (std::find(record.heads.begin(), record.heads.end(), head) != record.heads.end()) return &record;
  return nullptr;
}

// The same for query head `head`: its retention at every step, the evictions and occupancy
// of its cache (the GUI may replay the head alone where the policy allows it exactly).
bool same(const kvsim::GroupRecord& a, const kvsim::GroupRecord& b, int head) {
  const auto steps = [head](const kvsim::GroupRecord& r) {
    const auto k = static_cast<size_t>(std::find(r.heads.begin(), r.heads.end(), head) - r.heads.begin());
    const auto n = static_cast<size_t>(r.result.n_steps);
    return std::vector<float>(r.result.retention.begin() + static_cast<std::ptrdiff_t>(k * n),
                              r.result.retention.begin() + static_cast<std::ptrdiff_t>((k + 1) * n));
  };
  return a.result.eviction_step == b.result.eviction_step && a.result.occupancy == b.result.occupancy &&
         steps(a) == steps(b);
}

QString synth_trace(const kvtest::TempDir& dir, int layers, int heads, int kv_heads, int tokens) {
  kvtrace::SynthOptions options;
  options.n_layers = layers;
  options.n_heads = heads;
  options.n_kv_heads = kv_heads;
  options.head_dim = 16;
  options.n_tokens = tokens;
  options.n_sequences = 1;
  const QString path = QString::fromStdString(dir.file("gqa.h5"));
  kvtrace::write_synthetic_trace(path.toStdString(), options);
  return path;
}

// One layer of 8 heads in 4 kv groups, 160 tokens, opened in `window`.
bool open_gqa_layer(MainWindow& window, const kvtest::TempDir& dir) {
  return window.openFile(synth_trace(dir, 1, 8, 4, 160));
}

// With KVSIM_GUI_SHOTS=DIR, the window as it shows now (the charts' scenes updated, nothing
// waited for) as DIR/NAME.png.
void shot(MainWindow& window, const QString& name) {
  const QString dir = qEnvironmentVariable("KVSIM_GUI_SHOTS");
  if (dir.isEmpty()) return;
  QCoreApplication::processEvents();
  QVERIFY(window.centralWidget()->grab().save(dir + "/" + name + ".png"));
}

}  // namespace

class GuiCacheTest : public QObject {
  Q_OBJECT

 private slots:
  void sliderStepIsALookupOfWhatWasComputedAhead() {
    MainWindow window;
    window.setWholeRangeAhead(false);  // the neighbours alone: 45% is not computed ahead
    window.resize(1500, 950);
    window.show();
    QVERIFY(window.openFile(kTrace));
    window.controls()->policyEditor()->policyBox()->setCurrentText("h2o");
    window.waitIdle();
    QVERIFY(window.viewsAreCurrent());
    QSlider* slider = window.controls()->budgetSlider();
    QCOMPARE(slider->value(), 20);
    // One step: no event is handled in between, so nothing can have been replayed for it.
    slider->setValue(21);
    kvgui::Session* session = window.session();
    QCOMPARE(QString::fromStdString(session->budget().text), QString("21%"));
    QVERIFY(session->replayIsCurrent());
    QVERIFY(session->replay().cached);
    QVERIFY2(window.viewsAreCurrent(), "the overview and the step chart should show the step at once");
    shot(window, "10-slider-step-from-the-cache");
    const int64_t budget = 256 * 21 / 100;
    QCOMPARE(session->replay().budget, budget);
    const auto engine = engine_records(kTrace, 0, "h2o", budget);
    QVERIFY(same(*session->replay().record_of(0), *record_of(engine, 0), 0));
    // The overview's cells at 21% are the engine's, in every layer.
    for (int layer : {0, 3, 5}) {
      const auto records = engine_records(kTrace, layer, "h2o", budget);
      for (int head : {0, 4})
        QCOMPARE(window.overview()->value(layer, head),
                 kvsim::summarize(record_of(records, head)->result.retention).mean);
    }
    // Two steps down is ahead too, and so is ten up (kAheadSteps of 20%); 45% is not, and is
    // replayed.
    slider->setValue(19);
    QVERIFY(session->replay().cached);
    slider->setValue(30);
    QVERIFY(session->replay().cached);
    QVERIFY(same(*session->replay().record_of(0), *record_of(engine_records(kTrace, 0, "h2o", 256 * 30 / 100), 0), 0));
    slider->setValue(45);
    QVERIFY(!session->replayIsCurrent());
    window.waitIdle();
    QVERIFY(session->replayIsCurrent());
    QVERIFY(!session->replay().cached);
    QVERIFY(same(*session->replay().record_of(0), *record_of(engine_records(kTrace, 0, "h2o", 256 * 45 / 100), 0), 0));
  }

  void aJumpWithinTheStepsComputedAheadShowsEveryViewAtOnce() {
    // One layer: the overview computes its shown layer ahead, so it is the whole grid. A jump of
    // kAheadSteps slider steps handles no event before every view is current, each the engine's.
    kvtest::TempDir dir;
    const QString path = synth_trace(dir, 1, 8, 2, 160);
    MainWindow window;
    window.setWholeRangeAhead(false);  // the neighbours alone
    window.resize(1500, 950);
    window.show();
    QVERIFY(window.openFile(path));
    window.controls()->policyEditor()->policyBox()->setCurrentText("tova");
    // Every neighbour in (with the range off, waitAhead waits for the neighbours alone): the
    // session's and the overview's are chains of jobs, each asking for the next.
    window.waitAhead();
    QSlider* slider = window.controls()->budgetSlider();
    QCOMPARE(slider->value(), 20);
    for (int to : {20 + kvgui::kAheadSteps, 20 - kvgui::kAheadSteps + 1, 20 + kvgui::kAheadSteps - 2}) {
      slider->setValue(to);
      QVERIFY2(window.viewsAreCurrent(), qPrintable(QString("at %1%: not every view at once").arg(to)));
      QVERIFY(window.session()->replay().cached);
      const int64_t budget = kvsim::Budget::parse(std::to_string(to) + "%").resolve(160);
      const auto engine = engine_records(path, 0, "tova", budget);
      QVERIFY(same(*window.session()->replay().record_of(0), *record_of(engine, 0), 0));
      for (int head : {0, 3, 7}) {
        const kvsim::SimulationResult& r = record_of(engine, head)->result;  // the layer's one cache
        const auto steps = static_cast<size_t>(r.n_steps);
        QCOMPARE(window.overview()->value(0, head),
                 kvsim::summarize(std::span<const float>(r.retention).subspan(static_cast<size_t>(head) * steps, steps))
                     .mean);
      }
      window.waitAhead();  // and around the new budget
    }
    slider->setValue(20 + 3 * kvgui::kAheadSteps);  // beyond: computed anew
    QVERIFY(!window.viewsAreCurrent());
    window.waitIdle();
    QVERIFY(window.viewsAreCurrent());
  }

  void theWholeSliderRangeIsComputedAheadInTheBackground() {
    // After the neighbours, every other percent of the slider, for the shown and the compared
    // policies, on runners that waitIdle does not wait for: once done, any jump is a lookup
    // for every view, each the engine's.
    kvtest::TempDir dir;
    const QString path = synth_trace(dir, 1, 8, 2, 160);
    MainWindow window;
    window.resize(1500, 950);
    window.show();
    QVERIFY(window.openFile(path));
    window.charts()->stepChart()->setCompared({"h2o", "tova"});
    window.controls()->policyEditor()->policyBox()->setCurrentText("h2o");
    window.waitAhead();
    QSlider* slider = window.controls()->budgetSlider();
    QCOMPARE(slider->value(), 20);
    auto overview_is_engines = [&](const char* name, int64_t budget) {
      const auto engine = engine_records(path, 0, name, budget);
      for (int head : {0, 5}) {
        const kvsim::GroupRecord& record = *record_of(engine, head);
        const auto index =
            static_cast<size_t>(std::find(record.heads.begin(), record.heads.end(), head) - record.heads.begin());
        const auto steps = static_cast<size_t>(record.result.n_steps);
        QCOMPARE(window.overview()->value(0, head),
                 kvsim::summarize(std::span<const float>(record.result.retention).subspan(index * steps, steps)).mean);
      }
    };
    for (int to : {95, 1, 60, 33, 100}) {
      slider->setValue(to);
      QVERIFY2(window.viewsAreCurrent(), qPrintable(QString("at %1%: not every view at once").arg(to)));
      QVERIFY(window.session()->replay().cached);
      const int64_t budget = kvsim::Budget::parse(std::to_string(to) + "%").resolve(160);
      for (const char* name : {"h2o", "tova"}) {
        const auto engine = engine_records(path, 0, name, budget);
        const auto key = window.session()->replayKey(kvsim::choose_policy(name), budget);
        const auto records = window.session()->replays().find(key);
        QVERIFY2(records, name);
        const kvsim::GroupRecord* record = nullptr;
        for (const auto& r : *records)
          if (std::find(r.heads.begin(), r.heads.end(), 0) != r.heads.end()) record = &r;
        QVERIFY(record && same(*record, *record_of(engine, 0), 0));
      }
      overview_is_engines("h2o", budget);
    }
    // The oracle's overview replays each head: several budgets per pass in the range.
    window.controls()->policyEditor()->policyBox()->setCurrentText("oracle");
    window.waitAhead();
    for (int to : {3, 90}) {
      slider->setValue(to);
      QVERIFY2(window.viewsAreCurrent(), qPrintable(QString("oracle at %1%: not every view at once").arg(to)));
      overview_is_engines("oracle", kvsim::Budget::parse(std::to_string(to) + "%").resolve(160));
    }
  }

  void theOverviewsLayerIsTheSameOnAnyNumberOfThreads() {
    // The kv groups of a per-kv-head policy replayed side by side (what the overview waits
    // for): the records of one thread, in the same order, seeded policies included.
    kvtest::TempDir dir;
    MainWindow window;
    QVERIFY(open_gqa_layer(window, dir));
    window.waitIdle();
    const auto rows = window.session()->rows();
    const kvtrace::TraceMeta& meta = window.session()->meta();
    const int64_t budgets[] = {20, 48};
    for (const char* name : {"h2o", "random"}) {
      const kvsim::PolicyChoice policy = kvsim::choose_policy(name);
      const auto one = kvgui::replayWholeLayerAtBudgets(rows, meta, policy, budgets, {}, 1);
      for (int threads : {2, 3, 8}) {
        const auto many = kvgui::replayWholeLayerAtBudgets(rows, meta, policy, budgets, {}, threads);
        QCOMPARE(many.size(), one.size());
        for (size_t b = 0; b < one.size(); ++b) {
          QCOMPARE(many[b].size(), one[b].size());
          for (size_t g = 0; g < one[b].size(); ++g) {
            QCOMPARE(many[b][g].group, one[b][g].group);
            QVERIFY(many[b][g].heads == one[b][g].heads);
            QVERIFY(same(many[b][g], one[b][g], one[b][g].heads.front()));
          }
        }
      }
    }
  }

  void theSchedulerRunsAKeyOnceWhileItWaitsOrRuns() {
    kvgui::Scheduler scheduler;
    const kvgui::Scheduler::Lane shown{"test"}, ahead{"test", kvgui::Scheduler::Priority::neighbours};
    std::atomic<int> runs{0};
    int finished = 0;
    std::promise<void> gate;
    std::shared_future<void> open = gate.get_future().share();
    const auto job = [&]() -> kvgui::JobRunner::Job {
      return [&, open]() -> kvgui::JobRunner::Finish {
        ++runs;
        open.wait();
        return [&]() { ++finished; };
      };
    };
    QVERIFY(scheduler.submit(shown, job(), "a"));
    QVERIFY(!scheduler.submit(shown, job(), "a"));  // running on its lane
    QVERIFY(!scheduler.submit(ahead, job(), "a"));  // running on another lane
    QVERIFY(scheduler.submit(ahead, job(), "b"));
    QVERIFY(scheduler.submit(shown, job(), "c"));   // waits behind a
    QVERIFY(!scheduler.submit(ahead, job(), "c"));  // waiting on another lane
    QVERIFY(scheduler.submit(shown, job(), "d"));   // replaces c
    QVERIFY(!scheduler.submit(shown, job(), "a"));  // the newest request is the running one: d is dropped
    gate.set_value();
    scheduler.waitUpTo(kvgui::Scheduler::Priority::neighbours);
    QCOMPARE(runs.load(), 2);  // a and b
    QCOMPARE(finished, 2);
    QVERIFY(!scheduler.busy(shown) && !scheduler.busy(ahead));
  }

  void theOverviewInAWindowShowsTheCellsMadeForTheOneBeside() {
    MainWindow window;
    window.show();
    QVERIFY(window.openFile(kTrace));
    window.waitIdle();
    QVERIFY(window.overview()->isCurrent());
    window.showOverviewWindow();
    auto* grid = window.overviewWindow()->findChild<kvgui::OverviewGrid*>("overviewWindowGrid");
    QVERIFY(grid);
    QVERIFY2(grid->isCurrent() && !grid->busy(), "the session's cells should show at once");
    const kvtrace::TraceMeta& meta = window.session()->meta();
    for (int layer = 0; layer < meta.n_layers; ++layer)
      for (int head = 0; head < meta.n_heads; ++head)
        QCOMPARE(grid->value(layer, head), window.overview()->value(layer, head));
  }

  void forEachOnThreadsCallsEveryIndexOnceAndRethrows() {
    for (int threads : {1, 2, 5}) {
      std::vector<std::atomic<int>> calls(7);
      kvgui::forEachOnThreads(calls.size(), threads, [&](size_t i) { ++calls[i]; });
      for (const auto& count : calls) QCOMPARE(count.load(), 1);
      std::atomic<int> done{0};
      bool thrown = false;
      try {
        kvgui::forEachOnThreads(9, threads, [&](size_t i) {
          if (i == 4) throw std::runtime_error("part 4");
          ++done;
        });
      } catch (const std::runtime_error& e) {
        thrown = std::string(e.what()) == "part 4";
      }
      QVERIFY(thrown);
      if (threads == 1) QCOMPARE(done.load(), 4);  // nothing started after it
    }
  }

  void theOverviewTakesThePartsTheSessionMadeOrIsMaking() {
    kvtest::TempDir dir;
    MainWindow window;
    window.setWholeRangeAhead(false);  // the neighbours alone: 4 B is not computed ahead
    QVERIFY(open_gqa_layer(window, dir));
    window.waitIdle();
    kvgui::Session* session = window.session();
    const auto rows = session->rows();
    const kvtrace::TraceMeta& meta = session->meta();
    const int64_t budget = session->budgetTokens();
    const int64_t one[] = {budget};
    // A part given is taken as it is (here another budget's records, to tell them apart); one
    // whose maker was dropped (a broken promise) or failed (null) is replayed.
    const kvsim::PolicyChoice h2o = kvsim::choose_policy("h2o");
    const auto parts = kvgui::layerParts(h2o, meta, {});
    QCOMPARE(parts.size(), size_t{4});
    const auto own = kvgui::replayWholeLayerAtBudgets(rows, meta, h2o, one, {}, 1).front();
    const int64_t other[] = {budget / 2};
    const auto elsewhere = kvgui::replayWholeLayerAtBudgets(rows, meta, h2o, other, {}, 1).front();
    std::promise<kvgui::ReplayCache::Records> given, failed;
    given.set_value(std::make_shared<const std::vector<kvsim::GroupRecord>>(1, elsewhere[2]));
    failed.set_value(nullptr);
    std::map<int, kvgui::PartRecords> made{{parts[2].first, given.get_future().share()},
                                           {parts[3].first, failed.get_future().share()}};
    {
      std::promise<kvgui::ReplayCache::Records> dropped;
      made[parts[0].first] = dropped.get_future().share();
    }
    const auto taken = kvgui::replayWholeLayerAtBudgets(rows, meta, h2o, one, {}, 2, made).front();
    QCOMPARE(taken.size(), own.size());
    for (size_t g : {0, 1, 3}) QVERIFY(same(taken[g], own[g], own[g].heads.front()));
    QVERIFY(same(taken[2], elsewhere[2], own[2].heads.front()));
    QVERIFY(!same(taken[2], own[2], own[2].heads.front()));
    // The session offers the layer of a layer-wide policy while its replay runs, and the same
    // records when done; not a kv group of a policy it replays one head at a time (oracle).
    window.controls()->policyEditor()->policyBox()->setCurrentText("tova");
    const kvsim::PolicyChoice tova = kvsim::choose_policy("tova");
    const kvgui::ReplayHeads layer{0, meta.n_heads};
    const kvgui::PartRecords making = session->partRecords(tova, budget, layer);
    QVERIFY(making.valid());
    window.waitIdle();
    QVERIFY(making.get());
    QCOMPARE(making.get()->size(), session->replay().records.size());
    for (size_t r = 0; r < making.get()->size(); ++r)
      for (int head : {0, 5}) QVERIFY(same((*making.get())[r], session->replay().records[r], head));
    QVERIFY(session->partRecords(tova, budget, layer).get() == making.get());  // from the cache
    QVERIFY(!session->partRecords(tova, 4 * budget, layer).valid());  // beyond what was computed ahead
    QVERIFY(!session->partRecords(kvsim::choose_policy("oracle"), budget, parts[0]).valid());
  }

  void theStepChartsComparedReplaysAreEachPolicysOwn() {
    // Replayed side by side, the widest first: each kept under its own policy's key.
    kvtest::TempDir dir;
    MainWindow window;
    QVERIFY(open_gqa_layer(window, dir));
    const QStringList compared{"recent", "tova", "oracle", "random", "h2o", "snapkv"};
    window.charts()->stepChart()->setCompared(compared);
    window.waitIdle();
    QVERIFY(window.charts()->stepChart()->isCurrent());
    kvgui::Session* session = window.session();
    const int64_t budget = session->budgetTokens();
    for (const QString& name : compared) {
      const kvsim::PolicyChoice policy = kvsim::choose_policy(name.toStdString());
      const kvgui::ReplayCache::Records kept = session->replays().find(session->replayKey(policy, budget));
      QVERIFY2(kept, qPrintable(name));
      const auto own = kvgui::replayLayer(session->rows(), session->meta(), policy, budget, {}, 0);
      QCOMPARE(kept->size(), own.size());
      for (size_t r = 0; r < own.size(); ++r) QVERIFY2(same((*kept)[r], own[r], own[r].heads.front()), qPrintable(name));
    }
  }

  void theOverviewWaitsForAPauseOnlyWhileTheSliderIsDragged() {
    // A policy change or a jump computes at once; while the budget slider is held, the
    // overview waits for a pause in the moves.
    MainWindow window;
    window.show();
    QVERIFY(window.openFile(kTrace));
    window.waitIdle();
    kvgui::OverviewGrid* overview = window.overview();
    window.controls()->policyEditor()->policyBox()->setCurrentText("tova");
    QVERIFY(!overview->waitingForPause());
    window.waitIdle();
    window.session()->setAdjusting(true);  // as QSlider::sliderPressed does
    window.controls()->budgetSlider()->setValue(70);
    QVERIFY(overview->waitingForPause());
    window.session()->setAdjusting(false);
    window.controls()->budgetSlider()->setValue(95);
    QVERIFY(!overview->waitingForPause());
    window.waitIdle();
    QVERIFY(window.viewsAreCurrent());
  }

  void aPolicyWithoutABudgetIsReplayedOnce() {
    // scissorhands-official ignores B: every budget shows the one replay, at once, the engine's,
    // and so does the overview (the step chart's compared policies have budgets).
    kvtest::TempDir dir;
    const QString path = synth_trace(dir, 1, 8, 2, 160);
    MainWindow window;
    window.show();
    QVERIFY(window.openFile(path));
    window.controls()->policyEditor()->policyBox()->setCurrentText("scissorhands-official");
    window.waitIdle();
    QSlider* slider = window.controls()->budgetSlider();
    for (int to : {20 + 4 * kvgui::kAheadSteps, 3}) {
      slider->setValue(to);
      QVERIFY2(window.session()->replayIsCurrent() && window.session()->replay().cached,
               qPrintable(QString("at %1%: replayed again").arg(to)));
      QVERIFY2(window.overview()->isCurrent(), qPrintable(QString("at %1%: the overview computes again").arg(to)));
      const int64_t budget = kvsim::Budget::parse(std::to_string(to) + "%").resolve(160);
      QCOMPARE(window.session()->replay().budget, budget);
      const auto engine = engine_records(path, 0, "scissorhands-official", budget);
      QVERIFY(window.session()->replay().record_of(1) && record_of(engine, 1));
      QVERIFY(same(*window.session()->replay().record_of(1), *record_of(engine, 1), 1));
    }
  }

  void replaysComputedAheadAreTheEngines() {
    // Grouped-query attention (4 query heads per kv head), per-group, layer-wide, bound and
    // seeded policies: every replay in the cache is what replay_rows gives for its setting.
    kvtest::TempDir dir;
    const QString path = synth_trace(dir, 2, 8, 2, 120);
    MainWindow window;
    window.show();
    QVERIFY(window.openFile(path));
    window.session()->setLocation(0, 1, 5);
    for (const char* policy : {"scissorhands", "tova", "oracle", "random", "snapkv"}) {
      window.controls()->policyEditor()->policyBox()->setCurrentText(policy);
      window.waitIdle();
      kvgui::Session* session = window.session();
      int checked = 0;
      for (int percent = 18; percent <= 22; ++percent) {
        const int64_t budget = kvsim::Budget::parse(std::to_string(percent) + "%").resolve(120);
        const auto engine = engine_records(path, 1, policy, budget);
        for (const std::string& name : {std::string(policy), std::string("h2o"), std::string("streaming")}) {
          const kvsim::PolicyChoice choice = kvsim::choose_policy(name);
          const auto cached = session->replays().find(session->replayKey(choice, budget));
          QVERIFY2(cached, qPrintable(QString("%1 at B = %2 not computed ahead").arg(name.c_str()).arg(budget)));
          const auto expected = name == policy ? engine : engine_records(path, 1, name, budget);
          QVERIFY(record_of(*cached, 5));
          QVERIFY2(same(*record_of(*cached, 5), *record_of(expected, 5), 5),
                   qPrintable(QString("%1 at B = %2").arg(name.c_str()).arg(budget)));
          ++checked;
        }
      }
      QCOMPARE(checked, 15);
    }
  }

  void aCrossLayerPolicyAtLayerZeroIsReplayedFromTheRowsInMemory() {
    // Layer 0 is the first link of the chain: replay_rows on the session's rows gives what
    // replay_trace gives for it.
    kvtest::TempDir dir;
    const QString path = synth_trace(dir, 2, 8, 2, 96);
    MainWindow window;
    window.show();
    QVERIFY(window.openFile(path));
    window.controls()->policyEditor()->policyBox()->setCurrentText("scissorhands-xlayer");
    window.waitIdle();
    kvsim::ReplayConfig config;
    config.policies = {kvsim::choose_policy("scissorhands-xlayer")};
    config.budgets = {kvsim::Budget::parse("20%")};
    config.keep_records = true;
    const kvsim::ReplayResults results = kvsim::replay_trace(kvtrace::TraceReader(path.toStdString()), config);
    const kvsim::GroupRecord& expected = results.cells.front().records.at(0);
    QCOMPARE(expected.layer, 0);
    QVERIFY(window.session()->replay().valid());
    for (int head : {0, 7}) QVERIFY(same(window.session()->replay().records.at(0), expected, head));
    // The overview: layer 0 from the rows too, layer 1 from the chain of both layers.
    QVERIFY(window.overview()->isCurrent());
    for (const kvsim::GroupRecord& record : results.cells.front().records)
      for (int head : {0, 3, 7}) {
        const auto steps = static_cast<size_t>(record.result.n_steps);
        const double mean = kvsim::summarize(std::span<const float>(record.result.retention)
                                                 .subspan(static_cast<size_t>(head) * steps, steps))
                                .mean;
        QCOMPARE(window.overview()->value(record.layer, head), mean);
      }
  }

  void aBudgetThePolicyRefusesIsStillReported() {
    // StreamingLLM keeps 4 sinks: B = 3 is refused. Computing ahead skips it, and stepping
    // onto it shows the refusal.
    MainWindow window;
    window.show();
    QVERIFY(window.openFile(kTrace));
    kvgui::ControlsPanel* controls = window.controls();
    QTest::mouseClick(controls->tokensButton(), Qt::LeftButton);
    controls->budgetSlider()->setValue(5);
    controls->policyEditor()->policyBox()->setCurrentText("streaming");
    window.waitIdle();
    QVERIFY(window.session()->replay().valid());
    controls->budgetSlider()->setValue(3);
    window.waitIdle();
    QVERIFY(!window.session()->replay().valid());
    QVERIFY(!window.session()->replay().error.isEmpty());
  }

  void budgetChartComputesWhenShownAndKeepsItsCurves() {
    MainWindow window;
    window.show();
    QVERIFY(window.openFile(kTrace));
    window.waitIdle();
    kvgui::BudgetChart* chart = window.charts()->budgetChart();
    QVERIFY(!chart->isVisible());
    QVERIFY(!chart->busy());  // hidden: nothing computed for it
    window.charts()->setCurrentWidget(chart);
    window.waitIdle();
    QVERIFY(chart->isCurrent());
    // h2o is one of the compared policies: its curve is there, so the chart follows at once.
    window.controls()->policyEditor()->policyBox()->setCurrentText("h2o");
    QVERIFY(chart->isCurrent());
    QVERIFY(!chart->busy());
  }
};

QTEST_MAIN(GuiCacheTest)
#include "test_gui_cache.moc"
