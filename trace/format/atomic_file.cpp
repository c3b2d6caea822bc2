#include "kvtrace/atomic_file.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string_view>

#include "kvtrace/error.hpp"

namespace kvtrace {
namespace fs = std::filesystem;
namespace {

// Temporary files not yet committed or removed, in fixed slots a signal handler can read:
// unlink() is async-signal-safe, a std::set behind a mutex is not.
constexpr int kSlots = 64;
constexpr size_t kSlotLength = 4096;
char pending_path[kSlots][kSlotLength];
std::atomic<bool> pending_used[kSlots];
std::mutex pending_mutex;  // between threads registering; the handler only reads

void add_pending(const std::string& path) {
  if (path.size() >= kSlotLength) return;  // too long to clean up after a signal; still removed normally
  std::lock_guard lock(pending_mutex);
  for (int i = 0; i < kSlots; ++i)
    if (!pending_used[i].load()) {
      std::memcpy(pending_path[i], path.c_str(), path.size() + 1);
      pending_used[i].store(true);
      return;
    }
}

void drop_pending(const std::string& path) {
  std::lock_guard lock(pending_mutex);
  for (int i = 0; i < kSlots; ++i)
    if (pending_used[i].load() && path == pending_path[i]) pending_used[i].store(false);
}

extern "C" void remove_and_reraise(int signal) {
  for (int i = 0; i < kSlots; ++i)
    if (pending_used[i].load()) ::unlink(pending_path[i]);
  ::signal(signal, SIG_DFL);
  ::raise(signal);
}

// `path` with every symlink along it resolved, also when the last one dangles (the file it
// names is then created). Bounded, so a loop of links is an error, not a hang.
std::string resolve_links(const std::string& path) {
  fs::path current(path);
  for (int hop = 0; hop < 40; ++hop) {
    std::error_code ec;
    if (!fs::is_symlink(current, ec)) {
      const fs::path parent = current.has_parent_path() ? current.parent_path() : fs::path(".");
      const fs::path real_parent = fs::weakly_canonical(parent, ec);
      return ((ec ? parent : real_parent) / current.filename()).string();
    }
    const fs::path link = fs::read_symlink(current, ec);
    if (ec) throw InputError(path, "", "cannot read the symbolic link");
    current = link.is_absolute() ? link : (current.has_parent_path() ? current.parent_path() : fs::path(".")) / link;
  }
  throw InputError(path, "", "too many levels of symbolic links");
}

bool all_digits(std::string_view text, size_t most) {
  return !text.empty() && text.size() <= most &&
         std::all_of(text.begin(), text.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
}

// ".NAME.tmp-PID-N". NAME is cut (at a UTF-8 character's start) when the whole would pass the
// file system's limit on a name, so any legal name can be written: PID and N keep it unique.
std::string temporary_name(const std::string& name, unsigned counter) {
  std::string suffix = ".tmp-";
  suffix.append(std::to_string(::getpid())).append("-").append(std::to_string(counter));
  size_t length = std::min(name.size(), NAME_MAX - 1 - suffix.size());
  while (length > 0 && length < name.size() && (static_cast<unsigned char>(name[length]) & 0xC0) == 0x80) --length;
  std::string temporary = ".";  // built by appending: gcc 12 warns falsely (-Wrestrict) on "." + string
  return temporary.append(name, 0, length).append(suffix);
}

// The process that made `name` when it is one of the temporary names above; else 0.
pid_t temporary_owner(const std::string& name) {
  const size_t tmp = name.rfind(".tmp-");
  if (name.empty() || name[0] != '.' || tmp == std::string::npos || tmp < 2) return 0;
  const size_t dash = name.find('-', tmp + 5);
  if (dash == std::string::npos) return 0;
  const std::string_view pid(name.data() + tmp + 5, dash - tmp - 5),
      counter(name.data() + dash + 1, name.size() - dash - 1);
  if (!all_digits(pid, 10) || !all_digits(counter, 10)) return 0;
  const long long value = std::stoll(std::string(pid));
  return value > 0 && value <= INT_MAX ? static_cast<pid_t>(value) : 0;
}

// Removes the temporary files of processes that no longer run (SIGKILL, a crash or a power
// cut leave them): regular files of exactly this naming, in `dir` only, whose PID is no
// process here (kill(pid, 0) fails with ESRCH). A kvsim on another machine or in another PID
// namespace writing into a shared folder at that moment looks gone too: its file would be
// removed and its rename would fail, one line and exit 2.
void remove_stale_temporaries(const fs::path& dir) {
  std::error_code ec;
  for (fs::directory_iterator entry(dir, ec), end; !ec && entry != end; entry.increment(ec)) {
    const pid_t owner = temporary_owner(entry->path().filename().string());
    if (owner == 0 || owner == ::getpid()) continue;
    std::error_code type_error;
    if (entry->symlink_status(type_error).type() != fs::file_type::regular) continue;
    if (::kill(owner, 0) == 0 || errno != ESRCH) continue;  // running, or another user's: kept
    ::unlink(entry->path().c_str());
  }
}

// N when `path` is "/proc/self/fd/N", "/proc/PID/fd/N" of this process or "/dev/fd/N"; else -1.
int descriptor_number(const std::string& path) {
  const std::string own = "/proc/" + std::to_string(::getpid()) + "/fd/";
  for (const std::string& prefix : {std::string("/proc/self/fd/"), std::string("/dev/fd/"), own}) {
    if (path.rfind(prefix, 0) != 0) continue;
    const std::string_view number(path.data() + prefix.size(), path.size() - prefix.size());
    return all_digits(number, 9) ? std::stoi(std::string(number)) : -1;
  }
  return -1;
}

// The open descriptor `path` names, directly or through links (/dev/stdout): written through,
// as a pipe's or socket's link ("pipe:[123]") names no file to open. Else -1.
int descriptor_named(const std::string& path) {
  fs::path current(path);
  for (int hop = 0; hop < 40; ++hop) {
    const int fd = descriptor_number(current.lexically_normal().string());
    if (fd >= 0) return ::fcntl(fd, F_GETFD) >= 0 ? fd : -1;
    std::error_code ec;
    if (!fs::is_symlink(current, ec)) return -1;
    const fs::path link = fs::read_symlink(current, ec);
    if (ec) return -1;
    current = link.is_absolute() ? link : current.parent_path() / link;
  }
  return -1;
}

}  // namespace

AtomicFile::AtomicFile(std::string path, OutputKind kind) : path_(std::move(path)) {
  static std::atomic<unsigned> counter{0};
  if (path_.empty()) throw InputError("", "", "empty output path");
  if (path_ == "-") {
    if (kind == OutputKind::seekable)
      throw InputError("-", "", "cannot write this output to standard output: it needs a file");
    temp_path_ = target_ = path_;
    direct_ = true;
    return;
  }
  struct stat info {};  // of what the path names, links followed
  if (::stat(path_.c_str(), &info) != 0) {
    if (errno == ELOOP) throw InputError(path_, "", "too many levels of symbolic links");
  } else if (S_ISDIR(info.st_mode)) {
    throw InputError(path_, "", "is a directory; expected a file path");
  } else if (!S_ISREG(info.st_mode)) {
    if (!S_ISCHR(info.st_mode) && !S_ISFIFO(info.st_mode) && !S_ISSOCK(info.st_mode))
      throw InputError(path_, "", "is not a regular file, a character device, a FIFO or a socket");
    if (kind == OutputKind::seekable)
      throw InputError(path_, "", "is a device, FIFO or socket; this output needs a regular file (it seeks)");
    descriptor_ = descriptor_named(path_);
    if (descriptor_ < 0 && ::access(path_.c_str(), W_OK) != 0)
      throw InputError(path_, "", "cannot write: permission denied");
    temp_path_ = target_ = path_;
    direct_ = true;
    return;
  }
  target_ = resolve_links(path_);
  const fs::path target(target_);
  std::error_code ec;
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  if (!fs::is_directory(dir, ec)) throw InputError(path_, "", "cannot write: directory does not exist");
  if (::access(dir.c_str(), W_OK) != 0) throw InputError(path_, "", "cannot write: directory is not writable");
  temp_path_ = (dir / temporary_name(target.filename().string(), counter++)).string();
  add_pending(temp_path_);
}

AtomicFile::~AtomicFile() {
  if (committed_ || direct_) return;
  std::remove(temp_path_.c_str());
  drop_pending(temp_path_);
}

void AtomicFile::commit() {
  if (direct_) {
    committed_ = true;
    return;
  }
  if (std::rename(temp_path_.c_str(), target_.c_str()) != 0)
    throw InputError(
        path_, "", std::string("cannot write: rename of the finished temporary file failed: ") + std::strerror(errno));
  committed_ = true;
  drop_pending(temp_path_);
  const fs::path target(target_);
  remove_stale_temporaries(target.has_parent_path() ? target.parent_path() : fs::path("."));
}

void AtomicFile::uncommit() {
  if (committed_ && !direct_) ::unlink(target_.c_str());
}

void check_output_path(const std::string& path, OutputKind kind) { AtomicFile probe(path, kind); }

void check_distinct_paths(const std::vector<std::string>& inputs, const std::vector<std::string>& outputs) {
  struct Seen {
    std::string path;
    bool input;
  };
  // Identity: (device, inode) of what exists, else the resolved path.
  std::vector<std::pair<std::string, Seen>> seen;
  auto identity = [](const std::string& path, bool& stream) {
    stream = false;
    if (path == "-") return std::string("-");
    struct stat info {};
    if (::stat(path.c_str(), &info) != 0) return "path:" + resolve_links(path);
    stream = !S_ISREG(info.st_mode);
    return std::to_string(info.st_dev) + ":" + std::to_string(info.st_ino);
  };
  for (const std::string& input : inputs) {
    if (input.empty() || input == "-") continue;
    bool stream = false;
    seen.push_back({identity(input, stream), {input, true}});
  }
  for (const std::string& output : outputs) {
    if (output.empty()) continue;
    bool stream = false;
    const std::string id = identity(output, stream);
    if (stream) continue;
    for (const auto& [other_id, other] : seen)
      if (other_id == id)
        throw InputError(output, "",
                         other.input ? "is an input of this run (" + other.path + "); refusing to overwrite it"
                                     : "is given twice as an output (also as " + other.path + ")");
    seen.push_back({id, {output, false}});
  }
}

namespace {
int data_fd = STDOUT_FILENO;
}

void send_standard_output_to(int fd) { data_fd = fd; }

namespace {

// Writes `contents` where `file` says: its temporary file (synced to the disk, so that the
// rename commits whole data), an open descriptor, standard output, or a device or FIFO.
void write_contents(const AtomicFile& file, const std::string& contents, const std::string& failure) {
  auto fail = [&](int error) { throw InputError(file.final_path(), "", failure + ": " + std::strerror(error)); };
  const bool to_stdout = file.temp_path() == "-";
  if (to_stdout || file.descriptor() >= 0) std::fflush(stdout);  // what was printed before comes first
  const int fd = to_stdout ? ::dup(data_fd)
                 : file.descriptor() >= 0
                     ? ::dup(file.descriptor())
                     : ::open(file.temp_path().c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) fail(errno);
  int error = 0;
  for (size_t done = 0; done < contents.size() && error == 0;) {
    const ssize_t n = ::write(fd, contents.data() + done, contents.size() - done);
    if (n > 0)
      done += static_cast<size_t>(n);
    else if (n == 0 || errno != EINTR)
      error = n == 0 ? EIO : errno;
  }
  if (error == 0 && !file.direct() && ::fsync(fd) != 0) error = errno;
  if (::close(fd) != 0 && error == 0 && errno != EINTR) error = errno;
  if (error != 0) fail(error);
}

}  // namespace

void write_file_atomically(const std::string& path, const std::string& contents, OutputKind kind,
                           const std::string& failure) {
  AtomicFile file(path, kind);
  write_contents(file, contents, failure);
  file.commit();
}

void write_files_atomically(const std::vector<FileContents>& files, OutputKind kind, const std::string& failure) {
  std::vector<std::unique_ptr<AtomicFile>> outputs;
  for (const FileContents& file : files) outputs.push_back(std::make_unique<AtomicFile>(file.path, kind));
  for (size_t i = 0; i < files.size(); ++i) write_contents(*outputs[i], files[i].contents, failure);
  for (size_t i = 0; i < outputs.size(); ++i) {
    try {
      outputs[i]->commit();
    } catch (const InputError&) {
      for (size_t j = 0; j < i; ++j) outputs[j]->uncommit();
      throw;
    }
  }
}

void remove_temporaries_on_signals() {
  struct sigaction action {};
  action.sa_handler = remove_and_reraise;
  sigemptyset(&action.sa_mask);
  for (int signal : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction current {};
    sigaction(signal, nullptr, &current);
    if (current.sa_handler != SIG_IGN) sigaction(signal, &action, nullptr);  // ignored (nohup, &): stays so
  }
}

}  // namespace kvtrace
