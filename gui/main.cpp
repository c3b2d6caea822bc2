// kvsim-gui: placeholder window until the GUI issue fills it.
#include <QApplication>
#include <QLabel>

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  QLabel label("kvsim-gui");
  label.resize(400, 200);
  label.show();
  return app.exec();
}
