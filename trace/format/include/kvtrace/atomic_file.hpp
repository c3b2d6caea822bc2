#pragma once
// Where an output goes: the one owner of output paths. A regular file (or a new path) is
// written under a temporary name in its directory (".NAME.tmp-PID-N", NAME shortened when the
// whole would pass the file system's name limit) and renamed into place once complete, so a
// reader never sees a half-written file and a failed run leaves whatever was there. A
// symlink is followed to its target (the link stays a link). A character device, a FIFO or a
// socket is written directly (/dev/null, a pipe to another program, /proc/self/fd/1), never
// replaced. "-" means standard output for text outputs.
#include <string>
#include <vector>

namespace kvtrace {

enum class OutputKind {
  text,     // CSV, JSON: "-", devices and FIFOs allowed
  seekable  // HDF5, images: a regular file (or a new one) only
};

class AtomicFile {
 public:
  // Checks the path up front; throws InputError naming `path` if it cannot be written.
  explicit AtomicFile(std::string path, OutputKind kind = OutputKind::seekable);
  ~AtomicFile();  // removes the temporary file unless commit() succeeded
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // The path to write to: the temporary file, or the device, FIFO or "-" itself.
  const std::string& temp_path() const { return temp_path_; }
  const std::string& final_path() const { return path_; }
  bool direct() const { return direct_; }  // written in place: nothing to rename
  // For a path naming one of this process's descriptors (/proc/self/fd/N, /dev/fd/N,
  // /dev/stdout): N, written through (a socket cannot be opened by path); else -1.
  int descriptor() const { return descriptor_; }
  // Renames the temporary file over the final path, then removes the temporary files that
  // processes no longer running left in that folder (killed before they could).
  void commit();
  // Removes what commit() put under the final path: a file of a set written together, when a
  // later one of the set could not be committed.
  void uncommit();

 private:
  std::string path_;    // as given
  std::string target_;  // symlinks resolved
  std::string temp_path_;
  int descriptor_ = -1;
  bool direct_ = false;
  bool committed_ = false;
};

// Throws InputError naming `path` unless it can be written (checked up front, so a long run
// does not fail at its end). Creates nothing.
void check_output_path(const std::string& path, OutputKind kind = OutputKind::text);

// Throws InputError when an output would overwrite an input of the run, or two outputs are
// the same file (symlinks and hard links seen through; "-" twice is standard output twice).
// Devices and FIFOs may repeat. Empty paths are skipped.
void check_distinct_paths(const std::vector<std::string>& inputs, const std::vector<std::string>& outputs);

// Writes `contents` to `path` as AtomicFile(path, kind) does: written, flushed and synced to
// the disk (a regular file), then renamed into place; "-" writes to standard output (the
// descriptor given to send_standard_output_to, 1 by default). A failure throws InputError
// naming the path: "<failure>: <the system's error>".
void write_file_atomically(const std::string& path, const std::string& contents, OutputKind kind = OutputKind::text,
                           const std::string& failure = "cannot write");
void send_standard_output_to(int fd);

struct FileContents {
  std::string path, contents;
};
// Several files committed together: every one is written in full under its temporary name
// before any is renamed into place. A failure leaves no file of the set under its final name;
// one while writing (a full disk) leaves what the final names held before.
void write_files_atomically(const std::vector<FileContents>& files, OutputKind kind,
                            const std::string& failure = "cannot write");

// Installs handlers for SIGINT, SIGTERM and SIGHUP that remove every temporary file not yet
// committed, then end the process as the signal would have. For programs, not libraries.
void remove_temporaries_on_signals();

}  // namespace kvtrace
