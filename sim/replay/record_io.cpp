#include "record_io.hpp"

#include <cstring>
#include <stdexcept>

namespace kvsim {
namespace {

class Writer {
 public:
  template <class T>
  void value(const T& v) {
    out_.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  template <class T>
  void array(const std::vector<T>& v) {
    value<uint64_t>(v.size());
    out_.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
  }
  std::string& bytes() { return out_; }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(const std::string& in) : in_(in) {}
  template <class T>
  T value() {
    T v;
    take(&v, sizeof v);
    return v;
  }
  template <class T>
  std::vector<T> array() {
    std::vector<T> v(value<uint64_t>());
    take(v.data(), v.size() * sizeof(T));
    return v;
  }

 private:
  void take(void* out, size_t n) {
    if (at_ + n > in_.size()) throw std::runtime_error("truncated replay results from another rank");
    std::memcpy(out, in_.data() + at_, n);
    at_ += n;
  }
  const std::string& in_;
  size_t at_ = 0;
};

}  // namespace

std::string serialize_records(const std::vector<GroupRecord>& records, const std::vector<size_t>& cells) {
  Writer out;
  out.value<uint64_t>(records.size());
  for (size_t r = 0; r < records.size(); ++r) {
    const GroupRecord& record = records[r];
    const SimulationResult& result = record.result;
    out.value<uint64_t>(cells[r]);
    out.value<int32_t>(record.seq);
    out.value<int32_t>(record.layer);
    out.value<int32_t>(record.group);
    out.value<uint8_t>(record.layer_wide);
    out.array(record.heads);
    out.value<int32_t>(result.n_heads);
    out.value<int64_t>(result.first_step);
    out.value<int64_t>(result.n_steps);
    out.value<int64_t>(result.question_steps);
    out.array(result.retention);
    out.array(result.output_error);
    out.array(result.occupancy);
    out.array(result.eviction_step);
    out.value<int64_t>(result.evictions);
    out.value<int64_t>(result.budget);
  }
  return std::move(out.bytes());
}

void deserialize_records(const std::string& bytes, std::vector<GroupRecord>& records, std::vector<size_t>& cells) {
  Reader in(bytes);
  const auto count = in.value<uint64_t>();
  for (uint64_t r = 0; r < count; ++r) {
    GroupRecord record;
    cells.push_back(in.value<uint64_t>());
    record.seq = in.value<int32_t>();
    record.layer = in.value<int32_t>();
    record.group = in.value<int32_t>();
    record.layer_wide = in.value<uint8_t>() != 0;
    record.heads = in.array<int>();
    SimulationResult& result = record.result;
    result.n_heads = in.value<int32_t>();
    result.first_step = in.value<int64_t>();
    result.n_steps = in.value<int64_t>();
    result.question_steps = in.value<int64_t>();
    result.retention = in.array<float>();
    result.output_error = in.array<float>();
    result.occupancy = in.array<int32_t>();
    result.eviction_step = in.array<int32_t>();
    result.evictions = in.value<int64_t>();
    result.budget = in.value<int64_t>();
    records.push_back(std::move(record));
  }
}

}  // namespace kvsim
