// kvsim synth: synthetic traces of any shape (see kvtrace/synth.hpp for the structure).
#include <cstdio>

#include "../cli_common.hpp"
#include "kvtrace/synth.hpp"

namespace kvsim::cli {

int cmd_synth(const std::vector<std::string>& args) {
  kvtrace::SynthOptions o;
  std::string out, form = "qk", dtype = "float16";
  po::options_description options("synth options");
  options.add_options()("out,o", po::value(&out)->required(), "output trace file")(
      "layers", po::value(&o.n_layers)->default_value(o.n_layers), "layers")(
      "heads", po::value(&o.n_heads)->default_value(o.n_heads), "query heads per layer")(
      "kv-heads", po::value(&o.n_kv_heads)->default_value(o.n_kv_heads),
      "kv heads per layer (GQA when fewer than heads)")("head-dim", po::value(&o.head_dim)->default_value(o.head_dim),
                                                        "head dimension")(
      "tokens", po::value(&o.n_tokens)->default_value(o.n_tokens), "tokens per sequence")(
      "seqs", po::value(&o.n_sequences)->default_value(o.n_sequences), "sequences")(
      "prompt-len", po::value(&o.prompt_len)->default_value(-1), "prompt length (-1: half the tokens)")(
      "form", po::value(&form)->default_value(form), "qk (q, k), attn (packed rows) or both")(
      "no-v", "do not write values (v)")("dtype", po::value(&dtype)->default_value(dtype), "float16 or float32")(
      "seed", po::value(&o.seed)->default_value(o.seed), "random seed")(
      "model", po::value(&o.model)->default_value(o.model), "model name stored in the trace")(
      "compress", po::value(&o.compression)->default_value(0), "gzip level 0-9");
  add_progress_options(options);
  po::positional_options_description positional;
  positional.add("out", 1);
  po::variables_map vm;
  if (!parse_options("synth", "OUT.h5 [options]", args, options, positional, vm)) return 0;
  if (form == "qk") {
    o.write_qk = true, o.write_attn = false;
  } else if (form == "attn") {
    o.write_qk = false, o.write_attn = true;
  } else if (form == "both") {
    o.write_qk = true, o.write_attn = true;
  } else {
    bad_option("form", "unknown form '" + form + "' (qk, attn or both)");
  }
  o.write_v = vm.count("no-v") == 0;
  o.dtype = parse_dtype("dtype", dtype);
  if (o.compression < 0 || o.compression > 9) bad_option("compress", "must be 0..9");
  {
    Progress progress("synth");
    kvtrace::write_synthetic_trace(out, o, progress.callback());
  }
  std::printf("wrote %s: %d sequences x %lld tokens, %d layers x %d heads (%d kv), head_dim %d, form %s, %s\n",
              out.c_str(), o.n_sequences, static_cast<long long>(o.n_tokens), o.n_layers, o.n_heads, o.n_kv_heads,
              o.head_dim, form.c_str(), kvtrace::dtype_name(o.dtype));
  return 0;
}

}  // namespace kvsim::cli
