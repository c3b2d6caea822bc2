#pragma once
// Where kvsim's bundled data lives (model and GPU cards, the bundled traces): the folder
// holding models/, gpus/ and traces/.
#include <string>

namespace kvsim {

// In this order:
//  1. $KVSIM_DATA_DIR, when set and not empty;
//  2. the share/kvsim of the installation holding the running program or Python module,
//     found by walking up from the executable or shared object that holds this code (so an
//     installed tree can be moved); from the build tree the walk stops at the build folder;
//  3. the source tree's data/ when this code runs from the build tree it was built in;
//  4. share/kvsim under the install prefix the library was configured with;
//  5. the source tree's data/, when it still exists;
//  6. "data" (relative to the working directory).
std::string data_dir();

}  // namespace kvsim
