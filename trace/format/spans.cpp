// The optional spans of a sequence (docs/semantics.md, section 1): /seqs/<i>/spans holds four
// 1-D datasets of one length, at most Limits::max_spans: `start` and `end` (integers), `kind`
// and `name` (strings).
#include <H5Cpp.h>

#include <optional>

#include "h5io.hpp"
#include "reader_checks.hpp"

namespace kvtrace {
namespace {

constexpr size_t kMaxStringWidth = size_t{1} << 16;  // a fixed-width string dataset's, before reading

}  // namespace

std::vector<Span> load_spans(const TraceReader& reader, const H5::Group& group, int seq, int64_t n_tokens) {
  if (!group.nameExists("spans")) return {};
  const std::string path = seq_path(seq) + "/spans";
  const H5::Group spans = child_group(reader, group, "spans", path);
  std::optional<hsize_t> count;
  auto open = [&](const char* name, H5T_class_t type) {
    const std::string where = path + "/" + name;
    H5::DataSet dataset = child_dataset(reader, spans, name, where);
    if (dataset.getDataType().getClass() != type)
      reader.fail(where, type == H5T_INTEGER ? "is not an integer dataset" : "is not a string dataset");
    const auto shape = h5::dims(dataset);
    if (shape.size() != 1 || static_cast<int64_t>(shape[0]) > Limits::max_spans)
      reader.fail(where, "shape " + shape_string(shape) + ", expected [n] with n at most " +
                             std::to_string(Limits::max_spans));
    if (count && shape[0] != *count)
      reader.fail(where, "holds " + std::to_string(shape[0]) + " spans, " + path + "/start " + std::to_string(*count));
    count = shape[0];
    if (type == H5T_STRING && !dataset.getStrType().isVariableStr() && dataset.getStrType().getSize() > kMaxStringWidth)
      reader.fail(where, "absurd string width " + std::to_string(dataset.getStrType().getSize()) + " bytes");
    check_storage(reader, dataset, where);
    return dataset;
  };
  const H5::DataSet start = open("start", H5T_INTEGER), end = open("end", H5T_INTEGER),
                    kind = open("kind", H5T_STRING), name = open("name", H5T_STRING);
  const auto n = static_cast<size_t>(*count);
  std::vector<int64_t> starts(n), ends(n);
  std::vector<std::string> kinds, names;
  if (n == 0) return {};
  try {
    for (const H5::DataSet* dataset : {&start, &end, &kind, &name}) h5::check_chunks_inflate(*dataset);
    start.read(starts.data(), H5::PredType::NATIVE_INT64);
    end.read(ends.data(), H5::PredType::NATIVE_INT64);
    kinds = h5::read_strings(kind, n);
    names = h5::read_strings(name, n);
  } catch (const H5::Exception&) {
    reader.fail(path, "cannot read, file truncated or corrupt (" + h5::error_detail() + ")");
  }
  std::vector<Span> out(n);
  for (size_t i = 0; i < n; ++i) {
    out[i] = {names[i], kinds[i], starts[i], ends[i]};
    if (const std::string problem = span_problem(out[i], n_tokens); !problem.empty())
      reader.fail(path, "span " + std::to_string(i) + ": " + problem);
  }
  return out;
}

}  // namespace kvtrace
