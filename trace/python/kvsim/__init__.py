"""kvsim Python tools: the trace-file writer, the GPU dumper and checkpoint converters.

Submodules (import them explicitly; nothing heavy is imported here):
  kvsim.tracefile        write/read kvsim trace schema v1 (HDF5, needs numpy + h5py)
  kvsim.dump             record q/k/v from a Hugging Face model (needs torch + transformers)
  kvsim.convert_llama2c  llama2.c checkpoint -> Hugging Face Llama directory (numpy only)
"""

__version__ = "0.1.0"
