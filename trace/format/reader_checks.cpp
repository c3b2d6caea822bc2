#include "reader_checks.hpp"

#include "h5io.hpp"

namespace kvtrace {

std::string shape_string(const std::vector<hsize_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

void check_member(const TraceReader& reader, const H5::Group& parent, const std::string& name, H5O_type_t type,
                  const std::string& path) {
  const std::string what = type == H5O_TYPE_GROUP ? "group" : "dataset";
  if (!parent.nameExists(name)) reader.fail(path, "missing " + what);
  if (!h5::is_hard_link(parent, name)) reader.fail(path, "is a soft or external link, not a " + what);
  if (parent.childObjType(name) != type) reader.fail(path, "is not a " + what);
}

H5::Group child_group(const TraceReader& reader, const H5::Group& parent, const std::string& name,
                      const std::string& path) {
  check_member(reader, parent, name, H5O_TYPE_GROUP, path);
  return parent.openGroup(name);
}

void check_storage(const TraceReader& reader, const H5::DataSet& dataset, const std::string& path) {
  if (const std::string filter = h5::unsupported_filter(dataset); !filter.empty())
    reader.fail(path,
                "is compressed with " + filter + ", which kvsim does not read (it reads gzip, shuffle, fletcher32)");
  if (!h5::fully_written(dataset))
    reader.fail(path, "was never written in full: its missing chunks would read as fill values");
}

H5::DataSet child_dataset(const TraceReader& reader, const H5::Group& parent, const std::string& name,
                          const std::string& path) {
  check_member(reader, parent, name, H5O_TYPE_DATASET, path);
  H5::DataSet dataset = parent.openDataSet(name);
  if (!h5::chunks_within_shape(dataset)) reader.fail(path, "chunks larger than the dataset's shape");
  return dataset;
}

}  // namespace kvtrace
