#include "sweep_resume.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "kvsim/replay/report.hpp"
#include "kvsim/replay/sweep_table.hpp"
#include "kvtrace/atomic_file.hpp"
#include "kvtrace/error.hpp"
#include "kvtrace/reader.hpp"

namespace kvsim::cli {
namespace {

std::atomic<bool> interrupted{false};
extern "C" void on_interrupt(int) { interrupted.store(true); }

// The complete rows already in the file: every line that ends with a newline, after a header
// equal to ours. A line cut short by a kill is not complete and is dropped.
std::vector<std::string> complete_rows(const std::string& path, const std::string& header) {
  std::ifstream in(path, std::ios::binary);
  const std::string contents((std::istreambuf_iterator<char>(in)), {});
  if (contents.empty()) return {};
  if (contents.compare(0, header.size(), header) != 0)
    throw kvtrace::InputError(path, "", "--resume: the file is not a kvsim sweep CSV (its header differs)");
  std::vector<std::string> rows;
  size_t at = header.size();
  for (size_t end; (end = contents.find('\n', at)) != std::string::npos; at = end + 1)
    rows.push_back(contents.substr(at, end - at + 1));
  return rows;
}

void append(int fd, const std::string& text, const std::string& path) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0) throw kvtrace::InputError(path, "", "cannot write (disk full?)");
    done += static_cast<size_t>(n);
  }
  ::fsync(fd);
}

// The identifying fields of a row (policy, params, budget, quant) must match the grid cell.
bool same_cell(const SweepRow& row, const CellResult& expected) {
  return row.policy == expected.info->name && row.params == expected.params && row.budget == expected.budget.text &&
         row.quant == expected.quant.name;
}

// The complete rows found, read as the sweep CSV they are (every column required).
std::vector<SweepRow> read_rows(const std::string& path, const std::string& header,
                                const std::vector<std::string>& lines, SweepExtras extras) {
  if (lines.empty()) return {};
  std::string text = header;
  for (const auto& line : lines) text += line;
  std::vector<std::string> all;
  for (const auto& column : sweep_columns())
    if (written(column, extras)) all.push_back(column.name);
  return read_sweep_csv(text, path, all).rows;
}

// What identifies the trace without reading it whole: its size, modification time, and a
// hash of its first and last 64 KiB (FNV-1a).
std::string trace_identity(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) throw kvtrace::InputError(path, "", "cannot stat the trace");
  std::ifstream in(path, std::ios::binary);
  uint64_t hash = 1469598103934665603ull;
  auto mix = [&](std::streamoff from) {
    in.clear();
    in.seekg(from);
    std::vector<char> bytes(65536);
    in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    for (std::streamsize i = 0; i < in.gcount(); ++i)
      hash = (hash ^ static_cast<unsigned char>(bytes[i])) * 1099511628211ull;
  };
  mix(0);
  mix(std::max<std::streamoff>(0, static_cast<std::streamoff>(info.st_size) - 65536));
  char text[96];
  std::snprintf(text, sizeof text, "%lld bytes, modified %lld.%09ld, hash %016llx",
                static_cast<long long>(info.st_size), static_cast<long long>(info.st_mtim.tv_sec), info.st_mtim.tv_nsec,
                static_cast<unsigned long long>(hash));
  return text;
}

// Every setting that changes a row, one "name: value" line each, with the trace's identity.
// (Policies, parameters, budgets and quantization are also in each row.)
std::string settings_of(const kvtrace::TraceReader& reader, const ReplayConfig& config,
                        const ReplayCliOptions& values) {
  std::string policies, budgets;
  for (const auto& policy : config.policies) policies += (policies.empty() ? "" : ",") + policy.label;
  for (const auto& budget : config.budgets) budgets += (budgets.empty() ? "" : ",") + budget.text;
  auto indices = [](const std::vector<int>& list) {
    std::string out;
    for (int i : list) out.append(out.empty() ? "" : ",").append(std::to_string(i));
    return out.empty() ? std::string("all") : out;
  };
  std::string out;
  out += "trace: " + trace_identity(reader.path()) + "\n";
  out += "policies: " + policies + "\n";
  out += "budgets: " + budgets + "\n";
  out += "quant: " + (values.quant.empty() ? std::string("none") : values.quant) + "\n";
  out += "seqs: " + indices(config.sequences) + "\n";
  out += "layers: " + indices(config.layers) + "\n";
  out += "mode: " + std::string(mode_name(config.mode)) + "\n";
  out += "aggregate: " + values.aggregate + "\n";
  if (config.paging.on())  // only then, so the settings of earlier sweeps still match
    out.append("page: ").append(std::to_string(values.page)).append(" ").append(values.page_score).append("\n");
  out += "rows: " + values.rows + "\n";
  out += "output-error: " + values.output_error + "\n";
  out += "layer-budget: " + values.layer_budget + "\n";
  // Only when given, so the settings of sweeps without them read as before.
  if (!values.question.empty()) out += "question: " + values.question + "\n";
  if (!values.compress_every.empty()) out += "compress-every: " + values.compress_every + "\n";
  if (config.threshold.on())
    out += "threshold: " + values.threshold + " window " + std::to_string(config.threshold.window) + "\n";
  if (config.protect.on()) out += "protect: " + protection_text(config.protect) + "\n";
  if (config.head_floor >= 0) out += "head-budget: adaptive, floor " + std::to_string(config.head_floor) + "\n";
  if (config.share != Share::none) out += "share: " + values.share + ", " + values.share_score + "\n";
  return out;
}

// What kvsim wrote to `sidecar`: lines of text no longer than what this sweep would write
// (and some slack). A file that is not (a device, a FIFO, another format) is refused before
// anything of it is shown or held.
std::string read_settings(const std::string& sidecar, size_t expected) {
  auto refuse = [&]() {
    return kvtrace::InputError(sidecar, "",
                               "--resume: is not a settings file kvsim wrote; start the sweep again without --resume");
  };
  struct stat info {};
  if (::stat(sidecar.c_str(), &info) != 0 || !S_ISREG(info.st_mode)) throw refuse();
  std::ifstream in(sidecar, std::ios::binary);
  if (!in) throw kvtrace::InputError(sidecar, "", std::string("--resume: cannot read: ") + std::strerror(errno));
  const size_t most = 2 * expected + 4096;
  std::string recorded(most + 1, '\0');
  in.read(recorded.data(), static_cast<std::streamsize>(recorded.size()));
  recorded.resize(static_cast<size_t>(in.gcount()));
  if (recorded.size() > most) throw refuse();
  for (const unsigned char c : recorded)
    if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) throw refuse();
  return recorded;
}

// A resume continues only the sweep that wrote the rows: same trace, same settings. False
// when there are no settings to check (none written yet, or a sweep run without --resume
// that finished: `missing_ok`).
bool check_settings(const std::string& path, const std::string& settings, bool has_rows, bool missing_ok) {
  const std::string sidecar = path + ".settings";
  struct stat link {};
  if (::lstat(sidecar.c_str(), &link) != 0 && errno == ENOENT) {
    if (has_rows && !missing_ok)
      throw kvtrace::InputError(path, "",
                                "--resume: " + sidecar +
                                    " is missing, so these rows cannot be checked against "
                                    "this sweep; start it again without --resume");
    return false;
  }
  const std::string recorded = read_settings(sidecar, settings.size());
  std::istringstream a(recorded), b(settings);
  for (std::string was, now; std::getline(b, now);) {
    if (!std::getline(a, was)) was.clear();
    if (was != now)
      throw kvtrace::InputError(path, "",
                                "--resume: the rows were made with " +
                                    (was.empty() ? "other settings" : "'" + was + "'") + ", this sweep has '" + now +
                                    "'; start it again without --resume");
  }
  for (std::string was; std::getline(a, was);)  // a setting the rows had that this sweep lacks
    if (!was.empty())
      throw kvtrace::InputError(path, "",
                                "--resume: the rows were made with '" + was +
                                    "', this sweep has no such setting; start it again without --resume");
  return true;
}

// The file holds the header and `rows` and nothing more (no line cut short).
bool holds_only(const std::string& path, const std::string& header, const std::vector<std::string>& rows) {
  std::error_code error;
  uintmax_t size = header.size();
  for (const auto& row : rows) size += row.size();
  return std::filesystem::file_size(path, error) == size && !error;
}

// The sweep's results as its CSV holds them, for the table printed at the end.
ReplayResults results_of_csv(const kvtrace::TraceReader& reader, const ReplayConfig& config, const std::string& path,
                             const std::string& header, SweepExtras extras) {
  ReplayResults all;
  all.mode = config.mode;
  all.protocol = config.protocol;
  all.question = extras.question;
  all.question_auto = config.question_auto;
  all.paging = config.paging;
  all.threshold = config.threshold;
  all.protect = config.protect;
  all.sequences = config.sequences.empty() ? reader.n_sequences() : static_cast<int64_t>(config.sequences.size());
  all.layers = config.layers.empty() ? reader.meta().n_layers : static_cast<int64_t>(config.layers.size());
  all.heads = reader.meta().n_heads;
  for (const SweepRow& row : read_rows(path, header, complete_rows(path, header), extras)) {
    all.cells.push_back(cell_of_sweep_row(row));
    all.output_error = all.output_error || all.cells.back().output_error.count > 0;
  }
  return all;
}

}  // namespace

ReplayResults resumable_sweep(const kvtrace::TraceReader& reader, const ReplayConfig& config,
                              const ReplayCliOptions& values) {
  const std::string& path = values.csv;
  const size_t quants = std::max<size_t>(1, config.quant.size());
  const size_t per_policy = quants * config.budgets.size();
  const size_t total = config.policies.size() * per_policy;
  const bool question = config.protocol.question > 0 || config.question_auto;
  const SweepExtras extras{question, config.paging.on(), replay_span_kinds(reader, config)};
  const std::string header = sweep_csv_header(extras);

  // What each cell is, to check the rows found: label parts only, no replay.
  std::vector<CellResult> expected(total);
  for (size_t c = 0; c < total; ++c) {
    const PolicyChoice& policy = config.policies[c / per_policy];
    expected[c].info = policy.info;
    expected[c].params = policy.changed;
    expected[c].budget = config.budgets[c % config.budgets.size()];
    static const QuantSpec none;
    expected[c].quant = config.quant.empty() ? none : config.quant[c / config.budgets.size() % quants];
  }
  std::vector<std::string> rows = complete_rows(path, header);
  const std::string settings = settings_of(reader, config, values);
  // A finished sweep may have been run without --resume: its rows are then checked alone.
  const bool complete = rows.size() == total && holds_only(path, header, rows);
  const bool checked = check_settings(path, settings, !rows.empty(), complete);
  std::vector<SweepRow> found = read_rows(path, header, rows, extras);
  size_t done = 0;
  while (done < found.size() && done < total && same_cell(found[done], expected[done])) ++done;
  if (done < rows.size())
    throw kvtrace::InputError(path, "",
                              "--resume: row " + std::to_string(done + 1) +
                                  " is not this sweep's (other policies, budgets or quantization?)");
  if (complete) {  // nothing to do: the file stays as it is, byte for byte
    std::cerr << "kvsim sweep: " << path << " holds every row of this sweep already"
              << (checked ? "" : " (no " + path + ".settings to check its trace and settings against)")
              << "; nothing to resume\n";
    return results_of_csv(reader, config, path, header, extras);
  }
  rows.resize(done);
  found.resize(done);

  // Rewrite the file to exactly the header and the complete rows, then append as we go.
  {
    std::string kept = header;
    for (const auto& row : rows) kept += row;
    kvtrace::write_file_atomically(path + ".settings", settings);
    kvtrace::write_file_atomically(path, kept);
  }
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND);
  if (fd < 0) throw kvtrace::InputError(path, "", "cannot open for appending");
  if (done > 0 && done < total)
    std::cerr << "kvsim sweep: resuming " << path << ": " << done << " of " << total << " rows already done\n";

  struct sigaction action {
  }, previous_int{}, previous_term{};
  action.sa_handler = on_interrupt;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, &previous_int);
  sigaction(SIGTERM, &action, &previous_term);
  ReplayConfig chunk = config;
  chunk.cancel = &interrupted;
  try {
    for (size_t p = done / per_policy; p < config.policies.size(); ++p) {
      chunk.policies = {config.policies[p]};
      Progress progress("sweep " + config.policies[p].label);
      const ReplayResults results = replay_trace(reader, chunk, progress.callback());
      std::string text;
      for (size_t c = 0; c < results.cells.size(); ++c)
        if (p * per_policy + c >= done)
          text += sweep_csv_line(sweep_row(results.cells[c], results.mode, config.paging.page), extras);
      append(fd, text, path);
      done = (p + 1) * per_policy;
    }
  } catch (const Cancelled&) {
    ::close(fd);
    sigaction(SIGINT, &previous_int, nullptr);
    sigaction(SIGTERM, &previous_term, nullptr);
    throw Interrupted(path + ": interrupted: " + std::to_string(done) + " of " + std::to_string(total) +
                      " rows written; run the same command with --resume to continue");
  }
  ::close(fd);
  sigaction(SIGINT, &previous_int, nullptr);
  sigaction(SIGTERM, &previous_term, nullptr);

  return results_of_csv(reader, config, path, header, extras);
}

}  // namespace kvsim::cli
