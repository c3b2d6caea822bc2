// kvsim: replay attention traces through KV-cache eviction policies. One verb per file
// (cmd_*.cpp); this file only dispatches, maps errors to exit codes and checks that standard
// output was written.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ext/stdio_sync_filebuf.h>
#include <iostream>
#include <new>
#include <string>
#include <vector>

#include "cli_common.hpp"
#include "kvsim/core/heap.hpp"
#include "kvsim/core/version.hpp"
#include "kvtrace/atomic_file.hpp"
#include "mpi_split.hpp"

namespace kvsim::cli {
int cmd_info(const std::vector<std::string>& args);
int cmd_validate(const std::vector<std::string>& args);
int cmd_synth(const std::vector<std::string>& args);
int cmd_capture(const std::vector<std::string>& args);
int cmd_replay(const std::vector<std::string>& args);
int cmd_sweep(const std::vector<std::string>& args);
int cmd_policies(const std::vector<std::string>& args);
int cmd_plan(const std::vector<std::string>& args);
int cmd_rank(const std::vector<std::string>& args);
int cmd_analyze(const std::vector<std::string>& args);
int cmd_eval(const std::vector<std::string>& args);

const std::vector<Verb>& verbs() {
  static const std::vector<Verb> table = {
      {"info", "describe a trace: model, shape, forms, sequences and their prompts", cmd_info},
      {"validate", "check a trace completely (structure, shapes, NaN/Inf, attention rows)", cmd_validate},
      {"synth", "write a synthetic trace of any shape with realistic attention structure", cmd_synth},
      {"capture", "record a real trace from the built-in llama2.c model (stories15M) on the CPU", cmd_capture},
      {"replay", "replay one policy at one budget: retention, output error, occupancy per layer", cmd_replay},
      {"sweep", "replay policies x budgets: the retention-vs-budget table, CSV, JSON and plot", cmd_sweep},
      {"policies", "list the eviction policies and their parameters", cmd_policies},
      {"plan", "capacity planning: sequences that fit on a GPU per policy budget and KV quantization", cmd_plan},
      {"rank", "a sweep's leaderboard: mean quality over the budgets, smallest budget meeting a target", cmd_rank},
      {"analyze", "persistence of importance across steps and layers: tables, CSV, JSON, plots", cmd_analyze},
      {"eval", "closed loop: perplexity and top-1 agreement under eviction, beside replay retention", cmd_eval},
  };
  return table;
}
}  // namespace kvsim::cli

namespace {

// A closed standard descriptor would be taken by the next file opened (an output's temporary
// file) and what is printed would land in that file. Each is held by /dev/null opened the
// other way round, so writing to a closed standard output still fails (EBADF), and says so.
void hold_closed_standard_descriptors() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) >= 0 || errno != EBADF) continue;
    const int held = ::open("/dev/null", fd == 0 ? O_WRONLY : O_RDONLY);
    if (held >= 0 && held != fd) {
      ::dup2(held, fd);
      ::close(held);
    }
  }
}

// The first error writing standard output. glibc's stdout drops a buffer it could not write
// and keeps no errno, so stdout and std::cout go through a stream that writes descriptor 1
// itself and remembers why it failed.
int standard_output_error = 0;

ssize_t write_standard_output(void*, const char* data, size_t size) {
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(STDOUT_FILENO, data + done, size - done);
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n == 0 || errno != EINTR) {
      if (standard_output_error == 0) standard_output_error = n == 0 ? EIO : errno;
      break;
    }
  }
  return static_cast<ssize_t>(done);  // short: the stream marks itself failed
}

void route_standard_output() {
  FILE* stream = ::fopencookie(nullptr, "w", cookie_io_functions_t{nullptr, write_standard_output, nullptr, nullptr});
  if (!stream) return;
  // Buffered as glibc buffers stdout: by line at a terminal, else in blocks of the file's size.
  struct stat info {};
  const bool blocks = ::fstat(STDOUT_FILENO, &info) == 0 && info.st_blksize > 0;
  std::setvbuf(stream, nullptr, ::isatty(STDOUT_FILENO) ? _IOLBF : _IOFBF,
               blocks ? static_cast<size_t>(info.st_blksize) : BUFSIZ);
  stdout = stream;
  static __gnu_cxx::stdio_sync_filebuf<char> buffer(stream);
  std::cout.rdbuf(&buffer);
}

// Checked once, after the verb: what it printed must all have been written. A reader that
// stopped reading (EPIPE, with SIGPIPE ignored; at its default the signal ends kvsim first)
// asked for no more: not an error. A verb that failed has printed its one line already.
int check_standard_output(const std::string& verb, int code) {
  std::cout.flush();
  std::fflush(stdout);
  int error = standard_output_error;
  if (error == 0 && std::ferror(stdout)) error = EIO;  // the stream above could not be made
  if (code != 0 || error == 0 || error == EPIPE) return code;
  std::cerr << (verb.empty() ? "kvsim" : "kvsim " + verb) << ": cannot write standard output: " << std::strerror(error)
            << "\n";
  return 2;
}

void print_usage() {
  std::cout << "kvsim " << kvsim::version()
            << " - replay LLM attention traces through KV-cache eviction policies\n\n"
               "usage: kvsim <verb> [options]   (kvsim <verb> --help for each verb's options)\n\nverbs:\n";
  for (const auto& verb : kvsim::cli::verbs()) std::printf("  %-10s %s\n", verb.name, verb.summary);
}

// Sets `verb_name` once the first argument is known to be a verb.
int run_verb(const std::vector<std::string>& all_args, std::string& verb_name) {
  std::vector<std::string> args = all_args;
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    print_usage();
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "--version") {
    std::cout << "kvsim " << kvsim::version() << "\n";
    return 0;
  }
  const std::string name = args[0];
  args.erase(args.begin());
  for (const auto& verb : kvsim::cli::verbs()) {
    if (name != verb.name) continue;
    verb_name = name;
    try {
      return verb.run(args);
    } catch (const kvsim::cli::Interrupted& e) {
      std::cerr << "kvsim " << name << ": " << e.what() << "\n";
      return 130;
    } catch (const kvtrace::InputError& e) {
      std::cerr << "kvsim " << name << ": " << e.what() << "\n";
      return 2;
    } catch (const boost::program_options::error& e) {
      std::cerr << "kvsim " << name << ": " << e.what() << " (see kvsim " << name << " --help)\n";
      return 2;
    } catch (const std::bad_alloc&) {
      std::cerr << "kvsim " << name << ": out of memory\n";
      return 1;
    } catch (const std::exception& e) {
      std::cerr << "kvsim " << name << ": internal error: " << e.what() << "\n";
      return 1;
    }
  }
  std::cerr << "kvsim: unknown verb '" << name << "' (kvsim --help lists them)\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  hold_closed_standard_descriptors();
  route_standard_output();
  kvsim::keep_large_blocks_in_heap();
  kvtrace::remove_temporaries_on_signals();  // no temporary output outlives Ctrl-C or kill
  std::unique_ptr<kvsim::WorkSplit> split = kvsim::cli::start_mpi(argc, argv);
  kvsim::cli::set_work_split(split.get());
  std::string verb;
  int code = run_verb(std::vector<std::string>(argv + 1, argv + argc), verb);
  kvsim::cli::set_work_split(nullptr);
  split.reset();  // MPI_Finalize, when it ran under MPI
  code = check_standard_output(verb, code);
  // Every output is complete (or removed) by now. Exit without running the libraries'
  // teardown: after a failed write (a full disk) HDF5's own teardown would crash closing the
  // file it could not close (kvtrace/writer.cpp).
  std::fflush(nullptr);
  std::_Exit(code);
}
