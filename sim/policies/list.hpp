#pragma once
// Every policy kvsim knows, one line each: X(identifier) where sim/policies/<identifier>.cpp
// defines `PolicyInfo <identifier>_policy()`.
#define KVSIM_POLICIES(X)  \
  X(full)                  \
  X(scissorhands)          \
  X(scissorhands_official) \
  X(scissorhands_xlayer)   \
  X(h2o)                   \
  X(streaming)             \
  X(tova)                  \
  X(snapkv)                \
  X(pyramidkv)             \
  X(ada_snapkv)            \
  X(ada_h2o)               \
  X(cake)                  \
  X(observed_attention)    \
  X(knorm)                 \
  X(keydiff)               \
  X(lagkv)                 \
  X(expected_attention)    \
  X(curdkv)                \
  X(chunkkv)               \
  X(capkv)                 \
  X(kvcompose)             \
  X(rkv)                   \
  X(quest)                 \
  X(nacl)                  \
  X(defensivekv)           \
  X(kvcrush)               \
  X(leverage)              \
  X(non_causal_attention)  \
  X(compactor)             \
  X(cam)                   \
  X(merging)               \
  X(simlayerkv)            \
  X(duoattention)          \
  X(fastgen)               \
  X(finch)                 \
  X(triattention)          \
  X(recent)                \
  X(random)                \
  X(oracle)                \
  X(lookahead)
