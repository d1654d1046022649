#!/usr/bin/env bash
# Plain `.jsonl` rows files against gzipped ones (issue 21, item 4): `pack` of the bench corpus
# (corpus-4m, made by examples/bench_corpus.rs as bench/run.sh makes it) and of an unzipped copy of
# it (corpus-4m-plain: the same sidecars, every BASE.jsonl.gz as BASE.jsonl), interleaved: the
# gzipped corpus decompressed whole (files up to 8 MiB, the default) and streamed through the 1 MiB
# buffer (DATASET_PACKER_WHOLE_FILE_LIMIT=0), the plain one (always streamed through that buffer).
# Prints one line per run (wall s, user s, sys s, peak RSS KiB, rows/s) and the medians of each.
#
#   bench/plain.sh                BENCH_DIR=target/bench, BENCH_THREADS=2 workers, BENCH_REPEAT=5
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

BENCH_DIR=${BENCH_DIR:-target/bench}
BENCH_THREADS=${BENCH_THREADS:-2}
BENCH_REPEAT=${BENCH_REPEAT:-5}
BIN_DIR="${CARGO_TARGET_DIR:-target}/release"
PACKER=${PACKER:-$BIN_DIR/dataset-packer}
gz_dir="$BENCH_DIR/corpus-4m"
plain_dir="$BENCH_DIR/corpus-4m-plain"

cargo build --release --example bench_corpus --bin dataset-packer >&2
"$BIN_DIR/examples/bench_corpus" --out "$gz_dir" --runs 200 --rows-per-run 20000 --threads "$(nproc)" >&2
if [[ ! -f "$plain_dir/.complete" || "$gz_dir/.complete" -nt "$plain_dir/.complete" ]]; then
  echo "unzipping $gz_dir into $plain_dir…" >&2
  rm -rf "$plain_dir"
  (cd "$gz_dir" && find . -type d) | while read -r d; do mkdir -p "$plain_dir/$d"; done
  (cd "$gz_dir" && find . -name '*.meta.json') | while read -r f; do cp "$gz_dir/$f" "$plain_dir/$f"; done
  (cd "$gz_dir" && find . -name '*.jsonl.gz') | while read -r f; do
    gzip -dc "$gz_dir/$f" >"$plain_dir/${f%.gz}"
  done
  cp "$gz_dir/.complete" "$plain_dir/.complete"
fi
rows=$(sed -nE 's/.*"rows":([0-9]+).*/\1/p' "$gz_dir/.complete")
echo "corpus: $rows rows; gzipped $(du -sb "$gz_dir" | cut -f1) bytes, plain $(du -sb "$plain_dir" | cut -f1) bytes" >&2

median() { sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
declare -A walls cpus
out="$BENCH_DIR/pack-plain-bench"
for ((i = 1; i <= BENCH_REPEAT; i++)); do
  for what in gz-whole gz-streamed plain; do
    dir=$gz_dir limit=()
    [[ $what == plain ]] && dir=$plain_dir
    [[ $what == gz-streamed ]] && limit=(DATASET_PACKER_WHOLE_FILE_LIMIT=0)
    rm -rf "$out"
    find "$dir" -type f -exec cat {} + >/dev/null # a warm page cache for both forms
    env "${limit[@]}" /usr/bin/time -f "%e %U %S %M" -o "$BENCH_DIR/plain.time" \
      "$PACKER" pack --input "$dir" --output "$out" --workers "$BENCH_THREADS" --quiet >/dev/null
    read -r wall user sys rss <"$BENCH_DIR/plain.time"
    walls[$what]+="$wall "
    cpus[$what]+="$(awk "BEGIN { print $user + $sys }") "
    printf '#%d %-11s wall %5.2f s  user %5.2f s  sys %4.2f s  peak RSS %6d KiB  %9.0f rows/s  load %s\n' \
      "$i" "$what" "$wall" "$user" "$sys" "$rss" "$(awk "BEGIN { print $rows / $wall }")" \
      "$(cut -d' ' -f1 /proc/loadavg)"
  done
done
rm -rf "$out"
for what in gz-whole gz-streamed plain; do
  # shellcheck disable=SC2086 # the lists are meant to be word-split
  wall=$(printf '%s\n' ${walls[$what]} | median)
  # shellcheck disable=SC2086
  cpu=$(printf '%s\n' ${cpus[$what]} | median)
  printf 'median %-11s wall %5.2f s = %9.0f rows/s, CPU (user + sys) %5.2f s\n' \
    "$what" "$wall" "$(awk "BEGIN { print $rows / $wall }")" "$cpu"
done
