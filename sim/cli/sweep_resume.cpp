#include "sweep_resume.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "kvsim/report.hpp"
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
bool same_cell(const std::string& row, const CellResult& expected) {
  const std::vector<std::string> fields = split_csv_line(row.substr(0, row.size() - 1));
  return fields.size() > 4 && fields[0] == expected.info->name && fields[1] == expected.params &&
         fields[2] == expected.budget.text && fields[3] == expected.quant.name;
}

}  // namespace

ReplayResults resumable_sweep(const kvtrace::TraceReader& reader, const ReplayConfig& config,
                              const ReplayCliOptions& values) {
  const std::string& path = values.csv;
  const size_t quants = std::max<size_t>(1, config.quant.size());
  const size_t per_policy = quants * config.budgets.size();
  const size_t total = config.policies.size() * per_policy;
  const std::string header = sweep_csv_header();

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
  size_t done = 0;
  while (done < rows.size() && done < total && same_cell(rows[done], expected[done])) ++done;
  if (done < rows.size())
    throw kvtrace::InputError(path, "", "--resume: row " + std::to_string(done + 1) +
                                            " is not this sweep's (other policies, budgets or quantization?)");
  rows.resize(done);

  // Rewrite the file to exactly the header and the complete rows, then append as we go.
  {
    std::string kept = header;
    for (const auto& row : rows) kept += row;
    kvtrace::write_file_atomically(path, kept);
  }
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND);
  if (fd < 0) throw kvtrace::InputError(path, "", "cannot open for appending");
  if (done > 0 && done < total)
    std::cerr << "kvsim sweep: resuming " << path << ": " << done << " of " << total << " rows already done\n";

  struct sigaction action {}, previous_int{}, previous_term{};
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
        if (p * per_policy + c >= done) text += sweep_csv_row(results.cells[c], results.mode);
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

  ReplayResults all;
  all.mode = config.mode;
  all.sequences = config.sequences.empty() ? reader.n_sequences() : static_cast<int64_t>(config.sequences.size());
  all.layers = config.layers.empty() ? reader.meta().n_layers : static_cast<int64_t>(config.layers.size());
  all.heads = reader.meta().n_heads;
  for (const auto& row : complete_rows(path, header)) {
    all.cells.push_back(parse_sweep_csv_row(row.substr(0, row.size() - 1)));
    all.output_error = all.output_error || all.cells.back().output_error.count > 0;
  }
  return all;
}

}  // namespace kvsim::cli
