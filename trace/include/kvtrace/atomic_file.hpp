#pragma once
// Output files are written under a temporary name in the same directory and renamed into
// place once complete, so a reader never sees a half-written file.
#include <string>

namespace kvtrace {

class AtomicFile {
 public:
  // Checks that the directory of `path` is writable; throws InputError naming `path` if not.
  explicit AtomicFile(std::string path);
  ~AtomicFile();  // removes the temporary file unless commit() succeeded
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  const std::string& temp_path() const { return temp_path_; }
  const std::string& final_path() const { return path_; }
  void commit();  // rename the temporary file over the final path

 private:
  std::string path_;
  std::string temp_path_;
  bool committed_ = false;
};

// Throws InputError naming `path` unless a file can be created there (checked up front, so
// a long run does not fail at its end).
void check_output_path(const std::string& path);

// Writes `contents` to `path` atomically.
void write_file_atomically(const std::string& path, const std::string& contents);

}  // namespace kvtrace
