#!/usr/bin/env bash
# Fetches a reference tokenizer's vocabulary into a cache folder, in the
# files zerotrain reads (`--tokenizer hf|cl100k|o200k --tokenizer-dir DIR`):
#
#   scripts/tokenizers.sh NAME... [--dir ROOT]     NAME: llama3 llama2 mistral cl100k o200k, or all
#
# Each NAME goes to ROOT/NAME, ROOT defaulting to
# ${XDG_CACHE_HOME:-$HOME/.cache}/zerotrain/tokenizers:
#   llama3, llama2, mistral  tokenizer.json and tokenizer_config.json
#   cl100k, o200k            cl100k_base.tiktoken, o200k_base.tiktoken
# The vocabularies come from npm packages, pinned below with the sha256 of
# their tarballs: llama3-tokenizer-js, llama-tokenizer-js,
# mistral-tokenizer-js and js-tiktoken (with base64-js, which it imports).
# None ships the files themselves: each keeps its vocabulary in a compact form
# of its own, which scripts/tokenizers/export.mjs reads through the package's
# own code and writes out; the written files are checked against the sha256
# below too (the tiktoken files' are OpenAI's published ones). The packages
# stay unpacked in ROOT/npm/node_modules: the tests run their encoders there
# (scripts/tokenizers/reference.mjs) to compare ids.
# Idempotent: what is there and verifies is not fetched again, and nothing
# is printed then. Nothing is downloaded at training time.
set -euo pipefail

me=scripts/tokenizers.sh
here=$(cd "$(dirname "$0")" && pwd)

declare -A tarball_sha=(
  [llama3-tokenizer-js@1.2.0]=51084690c7239708a3eb6adead1173bfd61b1f4d31cb0b8487e12ba466346ff0
  [llama-tokenizer-js@1.2.2]=ee83014ac8b379b16cf8d81e99ffcdb23dfade8c0d2e751bd06e7dc0b8476e72
  [mistral-tokenizer-js@1.0.0]=e88fa5d2745641fa926da6386b64282d4268d129ed3496ec5896c77e5cbcadd7
  [js-tiktoken@1.0.21]=3b1f24b185565ca9a8d8f51466dfc4f99d67f1f05bc009258710ddb7a8d810fa
  [base64-js@1.5.1]=b1b7a945b52685269083425216d6597e33d97bf21699d656e92fdb3eb5210a85
)
# The packages each tokenizer needs, and the files it writes with their sums.
declare -A packages=(
  [llama3]="llama3-tokenizer-js@1.2.0"
  [llama2]="llama-tokenizer-js@1.2.2"
  [mistral]="mistral-tokenizer-js@1.0.0"
  [cl100k]="js-tiktoken@1.0.21 base64-js@1.5.1"
  [o200k]="js-tiktoken@1.0.21 base64-js@1.5.1"
)
declare -A outputs=(
  [llama3]="tokenizer.json:0586063f27691bf12fff46e57d563d19906e3e91c29869e1e147805b99f108e5 tokenizer_config.json:e9cc1d102ab270ed06b9189f178132e29f009361f5a130d7415bb72f9d1581ed"
  [llama2]="tokenizer.json:a0700fa91e6f3750a251c137727e716fb9d984ca9c41e253c57a623c297c4ffe tokenizer_config.json:432d647b8cc8432b4a6953e8da28c11977c5130eabca5c5382bb4423b2918819"
  [mistral]="tokenizer.json:ee9a6918bf9ba3fb1329f6e264bf0e4209e1864f73805e83ba1931c490fdb671 tokenizer_config.json:432d647b8cc8432b4a6953e8da28c11977c5130eabca5c5382bb4423b2918819"
  [cl100k]="cl100k_base.tiktoken:223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
  [o200k]="o200k_base.tiktoken:446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
)
all=(llama3 llama2 mistral cl100k o200k)

die() {
  echo "$me: $*" >&2
  exit 1
}

names=()
root=${XDG_CACHE_HOME:-${HOME:?is not set: give --dir ROOT}/.cache}/zerotrain/tokenizers
while [ $# -gt 0 ]; do
  case $1 in
    --dir) root=${2:?--dir needs a folder}; shift 2 ;;
    all) names+=("${all[@]}"); shift ;;
    *) [ -n "${packages[$1]:-}" ] || die "no tokenizer '$1' (known: ${all[*]}, all)"
       names+=("$1"); shift ;;
  esac
done
[ ${#names[@]} -gt 0 ] || die "usage: $me NAME... [--dir ROOT] (NAME: ${all[*]}, all)"

sum() { sha256sum "$1" | cut -d' ' -f1; }

# outputs_verify NAME: whether every file NAME writes is there with its sum.
outputs_verify() {
  local entry
  for entry in ${outputs[$1]}; do
    [ -f "$root/$1/${entry%%:*}" ] && [ "$(sum "$root/$1/${entry%%:*}")" = "${entry##*:}" ] ||
      return 1
  done
}

# The unpacked package is marked with its tarball's sum once it verified.
package_ready() {
  local dir=$root/npm/node_modules/${1%@*}
  [ -f "$dir/.sha256" ] && [ "$(cat "$dir/.sha256")" = "${tarball_sha[$1]}" ]
}

fetch_package() {
  local spec=$1 name=${1%@*} tmp
  package_ready "$spec" && return 0
  command -v npm >/dev/null 2>&1 ||
    die "npm is not installed; it fetches $spec (Debian package npm: scripts/deps.sh installs it)"
  tmp=$(mktemp -d)
  # shellcheck disable=SC2064  # expand now: the trap must remove this call's folder
  trap "rm -rf '$tmp'" RETURN
  echo "$me: fetching $spec into $root/npm"
  if ! (cd "$tmp" && npm pack --silent "$spec" >npm.log 2>&1); then
    cat "$tmp/npm.log" >&2
    die "npm pack $spec failed (is the npm registry reachable?)"
  fi
  local tgz=$tmp/${name}-${spec##*@}.tgz
  [ -f "$tgz" ] || die "npm pack $spec did not write $(basename "$tgz")"
  [ "$(sum "$tgz")" = "${tarball_sha[$spec]}" ] ||
    die "$spec has sha256 $(sum "$tgz"), expected ${tarball_sha[$spec]}"
  mkdir -p "$tmp/unpacked" && tar -xzf "$tgz" -C "$tmp/unpacked" || die "cannot unpack $spec"
  echo "${tarball_sha[$spec]}" >"$tmp/unpacked/package/.sha256"
  mkdir -p "$root/npm/node_modules" || die "cannot create $root/npm/node_modules"
  rm -rf "$root/npm/node_modules/$name"
  mv "$tmp/unpacked/package" "$root/npm/node_modules/$name" || die "cannot write $root/npm"
}

for name in "${names[@]}"; do
  for spec in ${packages[$name]}; do
    fetch_package "$spec"
  done
  outputs_verify "$name" && continue
  command -v node >/dev/null 2>&1 || die "node is not installed (Debian package nodejs)"
  # Written beside the target and renamed over it, so that a reader never
  # sees half a vocabulary.
  tmp=$root/.$name.tmp.$$
  rm -rf "$tmp"
  node "$here/tokenizers/export.mjs" "$name" "$root/npm/node_modules" "$tmp" ||
    die "scripts/tokenizers/export.mjs $name failed"
  for entry in ${outputs[$name]}; do
    f=${entry%%:*}
    [ "$(sum "$tmp/$f")" = "${entry##*:}" ] ||
      die "$name's $f has sha256 $(sum "$tmp/$f"), expected ${entry##*:}"
  done
  mkdir -p "$root/$name"
  for entry in ${outputs[$name]}; do
    mv -f "$tmp/${entry%%:*}" "$root/$name/${entry%%:*}" || die "cannot write $root/$name"
  done
  rm -rf "$tmp"
  outputs_verify "$name" || die "$root/$name: the files do not verify after writing them"
  echo "$me: wrote $name into $root/$name"
done
