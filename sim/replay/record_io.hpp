#pragma once
// GroupRecords to bytes and back, for gathering work from other processes (work_split.hpp).
#include <string>
#include <vector>

#include "kvsim/replay/replay.hpp"

namespace kvsim {

std::string serialize_records(const std::vector<GroupRecord>& records, const std::vector<size_t>& cells);
void deserialize_records(const std::string& bytes, std::vector<GroupRecord>& records, std::vector<size_t>& cells);

}  // namespace kvsim
