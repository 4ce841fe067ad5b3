#!/usr/bin/env bash
# make deps: installs what make test needs beyond Go when it is missing:
# clang-19 (clang++-19: the Metal shaders compiled as C++ for the emulation
# harness), qemu-user (qemu-aarch64: the arm64 tests) and ffmpeg (ffmpeg and
# ffprobe: video decoding, and the video tests encode their clips with it). On Debian/Ubuntu it
# runs apt-get as root or through password-less sudo; otherwise it says what
# to install and fails.
set -euo pipefail
need=()
command -v clang++-19 >/dev/null || need+=(clang-19)
command -v qemu-aarch64 >/dev/null || need+=(qemu-user)
{ command -v ffmpeg >/dev/null && command -v ffprobe >/dev/null; } || need+=(ffmpeg)
if [ ${#need[@]} -eq 0 ]; then
  echo "deps: clang++-19, qemu-aarch64, ffmpeg and ffprobe present"
  exit 0
fi
if ! command -v apt-get >/dev/null; then
  echo "deps: missing ${need[*]} (clang++-19 and qemu-aarch64 on PATH) and this is not a Debian/Ubuntu system:" >&2
  echo "deps: install them with the system's package manager; on a Mac see README.md (make test needs Linux)" >&2
  exit 1
fi
sudo=()
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    sudo=(sudo -n)
  else
    echo "deps: missing ${need[*]}; run: sudo apt-get install -y ${need[*]}" >&2
    echo "deps: (make deps installs them itself as root or with password-less sudo)" >&2
    exit 1
  fi
fi
echo "deps: installing ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
for p in "${need[@]}"; do
  if [ -z "$(apt-cache policy "$p" 2>/dev/null | sed -n 's/^ *Candidate: //p' | grep -v '(none)')" ]; then
    echo "deps: $p is not in this system's package lists (Debian 12+ and Ubuntu 24.04+ have it;" >&2
    echo "deps: elsewhere add LLVM's repository, https://apt.llvm.org, for clang-19)" >&2
    exit 1
  fi
done
# ffmpeg without its recommends (GPU drivers, sound servers): the tests run
# the command-line tools alone.
rest=()
for p in "${need[@]}"; do [ "$p" = ffmpeg ] || rest+=("$p"); done
[ ${#rest[@]} -eq 0 ] || "${sudo[@]}" apt-get install -y -qq "${rest[@]}" >/dev/null
if [[ " ${need[*]} " == *" ffmpeg "* ]]; then
  "${sudo[@]}" apt-get install -y -qq --no-install-recommends ffmpeg >/dev/null
fi
for c in clang++-19 qemu-aarch64 ffmpeg ffprobe; do
  command -v "$c" >/dev/null || { echo "deps: $c still missing after apt-get install" >&2; exit 1; }
done
echo "deps: installed ${need[*]}"
