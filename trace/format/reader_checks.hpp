#pragma once
// The reader's checks of a trace's members, shared by the files that read parts of a
// sequence (reader.cpp, spans.cpp): each refuses with TraceReader::fail, one line naming the
// dataset.
#include <H5Cpp.h>

#include <string>
#include <vector>

#include "kvtrace/reader.hpp"
#include "kvtrace/schema.hpp"

namespace kvtrace {

std::string shape_string(const std::vector<hsize_t>& shape);
// Member `name` of `parent` (shown as `path`) must be a hard link to a group or dataset:
// checked before it is opened, so HDF5 never follows a soft or external link of a bad file.
void check_member(const TraceReader& reader, const H5::Group& parent, const std::string& name, H5O_type_t type,
                  const std::string& path);
H5::Group child_group(const TraceReader& reader, const H5::Group& parent, const std::string& name,
                      const std::string& path);
// What HDF5 would do with the dataset's storage when a value of it is read: decode with a
// filter kvsim does not know, make up fill values for what was never written. (Checked after
// the dataset's type and shape, whose messages say more.)
void check_storage(const TraceReader& reader, const H5::DataSet& dataset, const std::string& path);
H5::DataSet child_dataset(const TraceReader& reader, const H5::Group& parent, const std::string& name,
                          const std::string& path);

// The spans of sequence `seq` (its group `group`, n_tokens tokens): none without a `spans`
// member; refused (TraceReader::fail) when they break schema v1 (docs/semantics.md, section 1).
std::vector<Span> load_spans(const TraceReader& reader, const H5::Group& group, int seq, int64_t n_tokens);

// Sequences of one context_group share their context: the same number of tokens before the
// question, the same ids. Refused (TraceReader::fail) otherwise.
void check_context_groups(const TraceReader& reader);

}  // namespace kvtrace
