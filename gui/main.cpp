// kvsim-gui: explore one trace. Which tokens does an eviction policy keep, step by step?
#include <QApplication>
#include <QCommandLineParser>
#include <QMessageBox>

#include "controls_panel.hpp"
#include "main_window.hpp"
#include "policy_editor.hpp"
#include "session.hpp"

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  QApplication::setOrganizationName("kvsim");
  QApplication::setApplicationName("kvsim-gui");
  QCommandLineParser parser;
  parser.setApplicationDescription("Explore one attention trace: which tokens an eviction policy keeps at a KV budget.");
  parser.addHelpOption();
  parser.addPositionalArgument("trace", "trace file (HDF5, schema v1) to open");
  QCommandLineOption seq("seq", "sequence to show", "i", "0"), layer("layer", "layer to show", "l", "0"),
      head("head", "query head to show", "h", "0"), policy("policy", "eviction policy", "name", "scissorhands"),
      budget("budget", "KV budget: tokens (64) or % (20%)", "B", "20%"),
      step("step", "step cursor (default: the last step)", "t", "-1");
  parser.addOptions({seq, layer, head, policy, budget, step});
  parser.process(app);

  kvgui::MainWindow window;
  window.show();
  const QStringList paths = parser.positionalArguments();
  if (!paths.isEmpty()) {
    QString error;
    if (!window.openFile(paths.front(), &error)) {
      QMessageBox::warning(&window, QObject::tr("Cannot open the trace"), error);
    } else {
      kvgui::Session* session = window.session();
      try {
        session->setBudget(kvsim::Budget::parse(parser.value(budget).toStdString()));
      } catch (const std::exception& e) {
        QMessageBox::warning(&window, QObject::tr("Bad budget"), QString::fromStdString(e.what()));
      }
      window.controls()->policyEditor()->setPolicy(parser.value(policy));
      QString policy_error;
      if (!session->setPolicy(parser.value(policy).toStdString(), {}, &policy_error))
        QMessageBox::warning(&window, QObject::tr("Bad policy"), policy_error);
      session->setLocation(parser.value(seq).toInt(), parser.value(layer).toInt(), parser.value(head).toInt());
      if (parser.value(step).toLongLong() >= 0) session->setStep(parser.value(step).toLongLong());
    }
  }
  return app.exec();
}
