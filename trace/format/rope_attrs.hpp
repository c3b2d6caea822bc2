#pragma once
// The optional RoPE attributes of a trace's root group (docs/traces.md): read and checked by
// TraceReader, written by TraceWriter when declared.
#include <functional>
#include <string>

#include "kvtrace/schema.hpp"

namespace H5 {
class H5Object;
}

namespace kvtrace {

// `fail(problem)` must throw; it is called with one line naming the attribute.
RopeMeta read_rope_attrs(const H5::H5Object& root, int head_dim, const std::function<void(const std::string&)>& fail);
void write_rope_attrs(H5::H5Object& root, const RopeMeta& rope);
// The problem with `rope` for a trace of this head_dim, or "" (the reader's checks).
std::string rope_problem(const RopeMeta& rope, int head_dim);

}  // namespace kvtrace
