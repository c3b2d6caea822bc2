#include "kvtrace/isolated_open.hpp"

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>

namespace kvtrace {
namespace {

constexpr size_t kMaxMessage = 4096;

[[noreturn]] void child_reads(const std::string& path, const IsolationLimits& limits, int message_fd) {
  // The parent's handlers (removing its temporary outputs) are not the child's to run.
  for (int signal : {SIGINT, SIGTERM, SIGHUP}) ::signal(signal, SIG_DFL);
  ::signal(SIGALRM, SIG_DFL);
  rlimit memory{limits.address_space, limits.address_space};
  setrlimit(RLIMIT_AS, &memory);
  alarm(static_cast<unsigned>(limits.seconds));
  int code = 0;
  std::string message;
  try {
    const TraceReader reader(path);
    for (int seq = 0; seq < reader.n_sequences(); ++seq) {
      (void)reader.tokens(seq);
      (void)reader.token_text(seq);
    }
  } catch (const InputError& e) {
    code = 2;
    message = e.what();
  } catch (const std::bad_alloc&) {
    code = 3;
  } catch (const std::exception& e) {
    code = 4;
    message = e.what();
  }
  if (message.size() > kMaxMessage) message.resize(kMaxMessage);
  for (size_t done = 0; done < message.size();) {
    const ssize_t n = ::write(message_fd, message.data() + done, message.size() - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  _exit(code);  // no atexit handlers, no flushing of the parent's buffers
}

std::string signal_name(int signal) {
  const char* abbrev = sigabbrev_np(signal);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(signal);
}

}  // namespace

void check_in_child_process(const std::string& path, const IsolationLimits& limits) {
  int fds[2];
  if (::pipe(fds) != 0) return;  // no isolation to be had; the open below still checks
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return;
  }
  if (pid == 0) {
    ::close(fds[0]);
    child_reads(path, limits, fds[1]);
  }
  ::close(fds[1]);
  std::string message;
  char buffer[512];
  for (;;) {
    const ssize_t n = ::read(fds[0], buffer, sizeof buffer);
    if (n > 0) {
      if (message.size() < kMaxMessage) message.append(buffer, static_cast<size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) {
    switch (WEXITSTATUS(status)) {
      case 0:
        return;
      case 2:
        throw InputError("", "", message);  // the reader's own line, file named
      case 3:
        throw InputError(path, "",
                         "reading the trace's structure needs more than " +
                             std::to_string(limits.address_space >> 20) +
                             " MiB: a corrupt size in the file (HDF5 believes it)");
      default:
        throw InputError(path, "", "cannot read the trace's structure: " + message);
    }
  }
  const int signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  // Ctrl-C or kill reached the child as part of this process's group: this process was
  // signalled too and its own handler decides.
  if (signal == SIGINT || signal == SIGTERM || signal == SIGHUP) return;
  if (signal == SIGALRM)
    throw InputError(path, "",
                     "HDF5 did not finish reading the trace's structure in " + std::to_string(limits.seconds) +
                         " s (a corrupt file: HDF5 1.10 can loop forever on one)");
  throw InputError(path, "",
                   "corrupt HDF5 file: HDF5 crashed (" + signal_name(signal) +
                       ") reading its structure, in a separate process");
}

TraceReader open_isolated(const std::string& path, const IsolationLimits& limits) {
  check_in_child_process(path, limits);
  return TraceReader(path);
}

}  // namespace kvtrace
