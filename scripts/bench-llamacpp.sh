#!/usr/bin/env bash
# bench-llamacpp.sh: paired prefill speed and peak memory of clef and llama.cpp
# on the same GGUF file, whole process, the method of the README's speed table.
#
# For each prompt length N it runs, in turn and alternating which goes first,
#   clef:      clef hidden --model FILE --ids <N different random ids> --threads T
#   llama.cpp: llama-bench -m FILE -p N -n 0 -t T -r 1 --no-warmup
# each as a whole process (start, mapping and reading the weights, the prefill
# of N tokens, exit), and prints per N the median tokens/s of each (N / wall
# seconds), the median of the pair-by-pair ratios clef/llama.cpp with their
# range, llama-bench's own in-process figure of the same runs, and the peak RSS
# of each against the file size. It never builds llama.cpp: point it at a
# llama-bench you built. See docs/bench-llamacpp.md.
set -euo pipefail

usage() {
	cat <<'EOF'
usage: scripts/bench-llamacpp.sh --llama-bench PATH --gguf FILE [options]

  --llama-bench PATH  llama.cpp's llama-bench binary (required; not built here)
  --gguf FILE         the GGUF both run (required), e.g. one written by clef quantize
  --tokens LIST       comma-separated prompt lengths (default 128,512,2048)
  --threads T         threads for both (default 2)
  --runs R            paired runs per length, after one unpaired warm-up of each (default 3)
  --clef PATH         clef binary (default: go build ./cmd/clef into a temporary directory)
  --seed S            seed of the random token ids (default 1)
  --keep DIR          keep every run's output and /usr/bin/time report in DIR

Environment for clef (e.g. CLEF_CPU_ISA) is passed through unchanged.
EOF
}

die() {
	echo "bench-llamacpp: $*" >&2
	exit 2
}

llama_bench="" gguf="" tokens="128,512,2048" threads=2 runs=3 clef="" seed=1 keep=""
while [ $# -gt 0 ]; do
	case "$1" in
	--llama-bench) llama_bench="${2-}"; shift 2 || die "--llama-bench needs a value" ;;
	--gguf) gguf="${2-}"; shift 2 || die "--gguf needs a value" ;;
	--tokens) tokens="${2-}"; shift 2 || die "--tokens needs a value" ;;
	--threads) threads="${2-}"; shift 2 || die "--threads needs a value" ;;
	--runs) runs="${2-}"; shift 2 || die "--runs needs a value" ;;
	--clef) clef="${2-}"; shift 2 || die "--clef needs a value" ;;
	--seed) seed="${2-}"; shift 2 || die "--seed needs a value" ;;
	--keep) keep="${2-}"; shift 2 || die "--keep needs a value" ;;
	-h | --help) usage; exit 0 ;;
	*) usage >&2; die "unknown argument: $1" ;;
	esac
done

[ -n "$llama_bench" ] || { usage >&2; die "--llama-bench is required"; }
[ -n "$gguf" ] || { usage >&2; die "--gguf is required"; }
[ -x "$llama_bench" ] || die "--llama-bench $llama_bench is not an executable file"
[ -f "$gguf" ] && [ -r "$gguf" ] || die "--gguf $gguf is not a readable file"
[ -x /usr/bin/time ] || die "/usr/bin/time (GNU time) is needed for the peak RSS"
[[ "$threads" =~ ^[1-9][0-9]*$ ]] || die "--threads must be a positive integer, got '$threads'"
[[ "$runs" =~ ^[1-9][0-9]*$ ]] || die "--runs must be a positive integer, got '$runs'"
[[ "$seed" =~ ^[0-9]+$ ]] || die "--seed must be a non-negative integer, got '$seed'"
[[ "$tokens" =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] || die "--tokens must be comma-separated positive integers, got '$tokens'"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ -n "$keep" ]; then
	mkdir -p "$keep" || die "cannot create --keep $keep"
else
	keep="$work/keep"
	mkdir -p "$keep"
fi

if [ -z "$clef" ]; then
	root=$(cd "$(dirname "$0")/.." && pwd)
	echo "building clef from $root" >&2
	(cd "$root" && go build -o "$work/clef" ./cmd/clef) || die "go build ./cmd/clef failed"
	clef="$work/clef"
fi
[ -x "$clef" ] || die "--clef $clef is not an executable file"

# ids N: N different pseudo-random token ids in [1000, 150000), the same for a
# given seed and N (ordinary vocabulary, no special tokens).
ids() {
	awk -v n="$1" -v s="$seed" 'BEGIN {
		srand(s * 100003 + n); out = ""
		while (k < n) {
			v = 1000 + int(rand() * 149000)
			if (!(v in seen)) { seen[v] = 1; out = out (k ? "," : "") v; k++ }
		}
		print out
	}'
}

# timed NAME CMD...: runs CMD as a whole process under /usr/bin/time -v;
# sets wall (seconds), rss (KiB) and fails loudly if CMD failed.
timed() {
	local name=$1
	shift
	local t0 t1
	t0=$(date +%s%N)
	if ! /usr/bin/time -v -o "$keep/$name.time" "$@" >"$keep/$name.out" 2>&1; then
		echo "bench-llamacpp: $name failed; its output:" >&2
		tail -n 20 "$keep/$name.out" >&2
		exit 1
	fi
	t1=$(date +%s%N)
	wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.4f", (b - a) / 1e9 }')
	rss=$(awk -F': ' '/Maximum resident set size/ { print $2 }' "$keep/$name.time")
}

# median of the numbers on stdin, one a line.
median() {
	sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) { print "nan"; exit }
		if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# llama_ts FILE: llama-bench's own prompt tokens/s from its -o csv output.
llama_ts() {
	awk -F',' 'NR == 1 { for (i = 1; i <= NF; i++) { f = $i; gsub(/"/, "", f); if (f == "avg_ts") c = i }; next }
		c && /^"/ { x = $c; gsub(/"/, "", x); print x }' "$1" | tail -n 1
}

file_bytes=$(stat -c %s "$gguf")
gib() { awk -v b="$1" 'BEGIN { printf "%.2f", b / 1073741824 }'; }

echo "clef:      $clef"
echo "llama.cpp: $llama_bench"
echo "file:      $gguf ($(gib "$file_bytes") GiB)"
echo "threads $threads, $runs paired runs per length after one warm-up each; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| tokens | clef tok/s | llama.cpp tok/s | ratio clef/llama.cpp (min-max) | llama-bench in-process tok/s | clef peak RSS GiB (x file) | llama.cpp peak RSS GiB (x file) |"
echo "| --- | --- | --- | --- | --- | --- | --- |"

IFS=',' read -r -a lengths <<<"$tokens"
for n in "${lengths[@]}"; do
	idlist=$(ids "$n")
	clef_cmd=("$clef" hidden --model "$gguf" --ids "$idlist" --threads "$threads" --out "$work/h.npy")
	llama_cmd=("$llama_bench" -m "$gguf" -p "$n" -n 0 -t "$threads" -r 1 --no-warmup -o csv)
	: >"$work/ratios" && : >"$work/clef_ts" && : >"$work/llama_ts" && : >"$work/llama_own"
	: >"$work/clef_rss" && : >"$work/llama_rss"
	timed "clef-$n-warmup" "${clef_cmd[@]}"
	timed "llama-$n-warmup" "${llama_cmd[@]}"
	for ((r = 1; r <= runs; r++)); do
		if ((r % 2)); then order="clef llama"; else order="llama clef"; fi
		for who in $order; do
			if [ "$who" = clef ]; then
				timed "clef-$n-$r" "${clef_cmd[@]}"
				cw=$wall
				echo "$rss" >>"$work/clef_rss"
			else
				timed "llama-$n-$r" "${llama_cmd[@]}"
				lw=$wall
				echo "$rss" >>"$work/llama_rss"
				llama_ts "$keep/llama-$n-$r.out" >>"$work/llama_own"
			fi
		done
		awk -v n="$n" -v w="$cw" 'BEGIN { printf "%.2f\n", n / w }' >>"$work/clef_ts"
		awk -v n="$n" -v w="$lw" 'BEGIN { printf "%.2f\n", n / w }' >>"$work/llama_ts"
		awk -v c="$cw" -v l="$lw" 'BEGIN { printf "%.4f\n", l / c }' >>"$work/ratios"
		echo "  N=$n run $r: clef ${cw}s, llama.cpp ${lw}s" >&2
	done
	ct=$(median <"$work/clef_ts")
	lt=$(median <"$work/llama_ts")
	ratio=$(median <"$work/ratios")
	rmin=$(sort -g "$work/ratios" | head -n 1)
	rmax=$(sort -g "$work/ratios" | tail -n 1)
	own=$(median <"$work/llama_own")
	crss=$(sort -g "$work/clef_rss" | tail -n 1)
	lrss=$(sort -g "$work/llama_rss" | tail -n 1)
	awk -v n="$n" -v ct="$ct" -v lt="$lt" -v r="$ratio" -v a="$rmin" -v b="$rmax" -v own="$own" \
		-v c="$crss" -v l="$lrss" -v f="$file_bytes" 'BEGIN {
		printf "| %d | %.1f | %.1f | %.2f (%.2f-%.2f) | %.1f | %.2f (%.2f) | %.2f (%.2f) |\n",
			n, ct, lt, r, a, b, own, c / 1048576, c * 1024 / f, l / 1048576, l * 1024 / f
	}'
done
echo
echo "tok/s = N / wall seconds of the whole process (median of the runs); ratio = median of the pair-by-pair"
echo "clef/llama.cpp tok/s; peak RSS = the largest of the runs. load average now: $(cut -d' ' -f1-3 /proc/loadavg)"
