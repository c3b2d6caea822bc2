#include "kvtrace/atomic_file.hpp"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "kvtrace/error.hpp"

namespace kvtrace {

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  namespace fs = std::filesystem;
  static std::atomic<unsigned> counter{0};
  const fs::path target(path_);
  if (path_.empty()) throw InputError("", "", "empty output path");
  std::error_code ec;
  if (fs::is_directory(target, ec)) throw InputError(path_, "", "is a directory; expected a file path");
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  if (!fs::is_directory(dir, ec)) throw InputError(path_, "", "cannot write: directory does not exist");
  if (::access(dir.c_str(), W_OK) != 0) throw InputError(path_, "", "cannot write: directory is not writable");
  std::string name = ".";  // built by appending: gcc 12 warns falsely (-Wrestrict) on "." + string
  name.append(target.filename().string()).append(".tmp-").append(std::to_string(::getpid()));
  name.append("-").append(std::to_string(counter++));
  temp_path_ = (dir / name).string();
}

AtomicFile::~AtomicFile() {
  if (!committed_) std::remove(temp_path_.c_str());
}

void AtomicFile::commit() {
  if (std::rename(temp_path_.c_str(), path_.c_str()) != 0)
    throw InputError(path_, "", "cannot write: rename of the finished temporary file failed");
  committed_ = true;
}

void check_output_path(const std::string& path) { AtomicFile probe(path); }

void write_file_atomically(const std::string& path, const std::string& contents) {
  AtomicFile file(path);
  {
    std::ofstream out(file.temp_path(), std::ios::binary | std::ios::trunc);
    out << contents;
    out.flush();
    if (!out) throw InputError(path, "", "cannot write (disk full or permission denied)");
  }
  file.commit();
}

}  // namespace kvtrace
