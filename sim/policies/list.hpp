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
  X(rkv)                   \
  X(quest)                 \
  X(triattention)          \
  X(recent)                \
  X(random)                \
  X(oracle)                \
  X(lookahead)
