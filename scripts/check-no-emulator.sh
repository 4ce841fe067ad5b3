#!/usr/bin/env bash
# Proves that the shipped binary holds no MSL emulator: builds ./cmd/clef for
# darwin/arm64 without cgo and looks for the emulator's symbols (the harness
# package internal/mslemu, the emulated GPU of metal/emu.go) in its symbol
# table. As a control, the same build with -tags mslemu must contain them,
# so that the search is known to find what it looks for.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
pattern='clef/internal/mslemu\.|clef/metal\.\(\*emuGPU\)'
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
build() { GOOS=darwin GOARCH=arm64 CGO_ENABLED=0 "$GO" build -trimpath "$@" ./cmd/clef; }
build -o "$tmp/clef"
build -tags mslemu -o "$tmp/clef-emu"
shipped=$("$GO" tool nm "$tmp/clef" | grep -cE "$pattern" || true)
control=$("$GO" tool nm "$tmp/clef-emu" | grep -cE "$pattern" || true)
if [ "$control" = 0 ]; then
  echo "no-emulator: the -tags mslemu control build has no emulator symbols: the check is broken"; exit 1
fi
if [ "$shipped" != 0 ]; then
  echo "no-emulator: the darwin/arm64 binary links the MSL emulator ($shipped symbols):"
  "$GO" tool nm "$tmp/clef" | grep -E "$pattern" | head -20
  exit 1
fi
echo "no-emulator: ok (darwin/arm64 clef: 0 emulator symbols; -tags mslemu control: $control)"
