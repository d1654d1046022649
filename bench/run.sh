#!/usr/bin/env bash
# Benchmark for `dataset-packer pack` against two "decompression floors" (zlib-rs streaming and
# libdeflate whole-file, each + a newline count), of pack's memory on long games, and of the commands
# that read a pack (validate, merge, shuffle, stats, show, export) against their issues' goals.
#
#   bench/run.sh            build, generate the corpora (once), run the floor and pack, print a table:
#                           the current logger's rows at depths 6-7 (corpus-4m) and 2-3
#                           (corpus-4m-d23), and the design notes' rows (corpus-4m-design)
#   bench/run.sh pack       same as above
#   bench/run.sh floor      build the examples, generate the corpus (once), run the floor only
#   bench/run.sh corpus     build the examples and generate the corpora only
#   bench/run.sh long       peak RSS of pack on 32 runs of 60000 steps at 1, 2, 4, 8, 16 workers (issue 15)
#   bench/run.sh validate   validate and validate --deep of the 4M-row pack (issue 3)
#   bench/run.sh merge      merge of two 2M-row packs vs cat of their shards (issue 4)
#   bench/run.sh shuffle    shuffle --memory 64MiB of the 4M-row pack (issue 5)
#   bench/run.sh stats      stats of the 4M-row pack (issue 6)
#   bench/run.sh show       show of a middle run of a 100-shard copy of it (issue 6)
#   bench/run.sh export     export of the 4M-row pack to Parquet (issue 6)
#   bench/run.sh update     pack --update adding 5% to a 4M-row and an 8M-row pack (issue 10)
#   bench/run.sh companions merge and shuffle of packs with [rows, 64] float32 embeddings (issue 12)
#   bench/run.sh report     report of the 4M-row pack and of a 40M-row pack (ten copies merged) (issue 24)
#   bench/run.sh commands   the nine above
#   bench/run.sh all        floor, pack and the nine above
#   bench/run.sh peers      the Python package against MosaicML Streaming, HF datasets and Lance,
#                           and through a DataLoader (issue 23); makes target/bench/peers-venv from
#                           bench/peers-requirements.txt (PyPI), not part of `all`
#   Several modes may be given (bench/run.sh validate stats). The commands reuse target/bench/pack-4m
#   (packed first when missing, not 4M rows, or older than the binary).
#
# Environment:
#   BENCH_DIR=target/bench   where corpora, pack outputs, logs and results go (keep it under target/)
#   BENCH_2X=1               also run the 8M-row corpus (400 runs x 20000 rows, current rows, depths 6-7)
#   BENCH_THREADS=2          floor threads and `pack --workers`
#   BENCH_REPEAT=1           runs of each measurement; the fastest is reported (RSS: the largest)
#   BENCH_GEN_THREADS=nproc  threads for corpus generation (output does not depend on it)
#   BENCH_IDLE_WAIT=120      before each measurement, wait up to this many seconds for an idle CPU
#                            (>= 90% idle over 1 s); busy measurements are flagged in the report
#   BENCH_LAYOUT=stream      gzip layout of the corpus: stream (one member, level 6, as `gzip` writes),
#                            members:N or flush:N (bench/README.md);
#                            another layout than the default gets its own corpus-4m-<layout> folder
#   EXTRA_PACK_ARGS=""       extra arguments appended to the pack command line (word-split)
#   CARGO_TARGET_DIR         honoured when locating the built binaries
#   PACKER=path              pack binary to measure (default: $CARGO_TARGET_DIR/release/dataset-packer)
#   BENCH_SHOW_RUNS=10       show: runs timed back to back (best and median reported)
#   PEERS_ARGS=""            peers: extra arguments of bench/python_peers.py (word-split), e.g.
#                            "--systems ours,lance --budget 4"
#   BENCH_REPORT_40M=1       report: also build (once, ~2 GB) and measure the 40M-row pack
# See bench/README.md for what the figures mean and the goals.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

COMMAND_MODES=(validate merge shuffle stats show export update companions report)
usage="usage: bench/run.sh [pack|floor|corpus|long|validate|merge|shuffle|stats|show|export|update|companions|report|commands|all|peers]..."
# DO_FLOOR: floor table; DO_PACK: pack next to it; DO_CMDS: the command benchmarks, in order.
DO_FLOOR=0 DO_PACK=0 DO_CORPUS=0 DO_LONG=0 DO_PEERS=0
DO_CMDS=()
add_cmd() { [[ " ${DO_CMDS[*]} " == *" $1 "* ]] || DO_CMDS+=("$1"); }
[[ $# -gt 0 ]] || set -- pack # no argument: floor + pack, as always
for MODE in "$@"; do
  case "$MODE" in
    pack) DO_FLOOR=1 DO_PACK=1 ;;
    floor) DO_FLOOR=1 ;;
    corpus) DO_CORPUS=1 ;;
    long) DO_LONG=1 ;;
    peers) DO_PEERS=1 DO_CORPUS=1 ;; # the corpus, then the peers after it
    validate | merge | shuffle | stats | show | export | update | companions | report) add_cmd "$MODE" ;;
    commands) for m in "${COMMAND_MODES[@]}"; do add_cmd "$m"; done ;;
    all)
      DO_FLOOR=1 DO_PACK=1
      for m in "${COMMAND_MODES[@]}"; do add_cmd "$m"; done
      ;;
    -h | --help)
      sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'
      exit 0
      ;;
    *)
      echo "$usage" >&2
      exit 2
      ;;
  esac
done
# Only the corpus: nothing is measured.
CORPUS_ONLY=0
if [[ $DO_CORPUS == 1 && $DO_FLOOR == 0 && $DO_LONG == 0 && ${#DO_CMDS[@]} == 0 ]]; then CORPUS_ONLY=1; fi

BENCH_DIR=${BENCH_DIR:-target/bench}
BENCH_THREADS=${BENCH_THREADS:-2}
BENCH_REPEAT=${BENCH_REPEAT:-1}
BENCH_IDLE_WAIT=${BENCH_IDLE_WAIT:-120}
BENCH_GEN_THREADS=${BENCH_GEN_THREADS:-$(nproc)}
DEFAULT_LAYOUT=stream # keep in step with DEFAULT_LAYOUT in examples/bench_corpus.rs
BENCH_LAYOUT=${BENCH_LAYOUT:-$DEFAULT_LAYOUT}
EXTRA_PACK_ARGS=${EXTRA_PACK_ARGS:-}
TARGET_DIR=${CARGO_TARGET_DIR:-target}
BIN_DIR="$TARGET_DIR/release"
CORPUS_GEN="$BIN_DIR/examples/bench_corpus"
FLOOR="$BIN_DIR/examples/gunzip_floor"
PACKER_SET=${PACKER:+1}
PACKER=${PACKER:-$BIN_DIR/dataset-packer}
ROWS_PER_RUN=20000
# Row layout and search depths of corpus-4m and corpus-8m (what the command benchmarks read);
# bench_corpus's defaults, spelled out.
MAIN_ROWS=(--rows current --depth 6-7)

mkdir -p "$BENCH_DIR/logs"
STAMP=$(date +%Y%m%d-%H%M%S)

log() { echo "[bench] $*" >&2; }

# Pulls a numeric field out of the flat one-line JSON that gunzip_floor prints.
json_num() { sed -nE "s/.*\"$2\":(-?[0-9.eE+-]+).*/\1/p" <<<"$1"; }
calc() { awk "BEGIN { printf \"$1\", $2 }"; }

# ------------------------------------------------------------------ build
if [[ $DO_PACK == 0 && $DO_LONG == 0 && $DO_PEERS == 0 && ${#DO_CMDS[@]} == 0 ]]; then
  build=(cargo build --release --example bench_corpus --example gunzip_floor)
else
  build=(cargo build --release --examples --bins)
fi
log "building: ${build[*]}"
build_failed=0
if ! "${build[@]}"; then
  build_failed=1
  # src/ is edited concurrently: the examples link the package's library (if any), so a broken
  # src/ can break their build. Fall back to binaries from an earlier build when they exist.
  if [[ -x "$CORPUS_GEN" && -x "$FLOOR" ]]; then
    log "WARNING: build failed; using previously built examples in $BIN_DIR/examples"
  else
    log "build failed and no previously built examples exist"
    exit 1
  fi
fi

# ------------------------------------------------------------------ corpora
# name:runs:row layout:depths. corpus-4m holds the current logger's rows at depths 6-7; the pack
# table also measures them at depths 2-3 (smaller search counters) and the design notes' rows
# (no search object), each against its own floor.
corpora=("4m:200:current:6-7")
# The command benchmarks only need corpus-4m (to build the 4M pack and its two partitions).
if [[ $DO_FLOOR == 1 || $CORPUS_ONLY == 1 ]]; then
  corpora+=("4m-d23:200:current:2-3" "4m-design:200:design:6")
fi
if [[ "${BENCH_2X:-0}" == 1 && ($DO_FLOOR == 1 || $CORPUS_ONLY == 1) ]]; then
  corpora+=("8m:400:current:6-7")
fi

# The corpus folder of a corpus name (4m, 8m) in the chosen layout.
corpus_dir() {
  if [[ "$BENCH_LAYOUT" == "$DEFAULT_LAYOUT" ]]; then
    echo "$BENCH_DIR/corpus-$1"
  else
    echo "$BENCH_DIR/corpus-$1-${BENCH_LAYOUT//:/}"
  fi
}

for spec in "${corpora[@]}"; do
  IFS=: read -r name runs rows depths <<<"$spec"
  dir=$(corpus_dir "$name")
  log "corpus $dir: $runs runs x $ROWS_PER_RUN rows, $rows rows at depth $depths, layout $BENCH_LAYOUT (generated once; reused when complete)"
  start=$(date +%s.%N)
  "$CORPUS_GEN" --out "$dir" --runs "$runs" --rows-per-run "$ROWS_PER_RUN" --threads "$BENCH_GEN_THREADS" \
    --layout "$BENCH_LAYOUT" --rows "$rows" --depth "$depths" >&2
  log "corpus $dir ready in $(calc %.1f "$(date +%s.%N) - $start") s ($(du -sh "$dir" | cut -f1))"
done

# ------------------------------------------------------------------ peers (issue 23)
# bench/python_peers.py makes its venv, the 1M-row-shard pack of corpus-4m and the peers' copies
# of it (all once, under target/bench), then prints its table.
if [[ $DO_PEERS == 1 ]]; then
  # shellcheck disable=SC2086 # PEERS_ARGS is word-split on purpose
  PACKER="$PACKER" python3 bench/python_peers.py "$BENCH_DIR/pack-4m-1m-shards" \
    --venv "$BENCH_DIR/peers-venv" ${PEERS_ARGS:-} | tee "$BENCH_DIR/logs/peers-$STAMP.txt"
fi
if [[ $CORPUS_ONLY == 1 ]]; then exit 0; fi

# Reads every compressed file once so the floor and pack both start from a warm page cache.
warm() { find -L "$1" -name '*.jsonl.gz' -type f -exec cat {} + >/dev/null; }

# ------------------------------------------------------------------ pack availability
pack_ok=0
pack_note=""
if [[ $DO_PACK == 1 || $DO_LONG == 1 || ${#DO_CMDS[@]} -gt 0 ]]; then
  if [[ $build_failed == 1 && -z "$PACKER_SET" ]]; then
    pack_note="cargo build failed; not measuring a stale $PACKER (set PACKER= to force)"
  elif [[ ! -x "$PACKER" ]]; then
    pack_note="no binary at $PACKER"
  elif ! "$PACKER" pack --help 2>&1 | grep -q -- --input; then
    pack_note="'$PACKER pack --help' fails or lists no --input: pack subcommand not available yet"
  else
    pack_ok=1
  fi
  if [[ $pack_ok != 1 ]]; then
    if [[ $DO_PACK == 1 ]]; then log "WARNING: skipping pack: $pack_note"; fi
    if ((${#DO_CMDS[@]} > 0)); then log "WARNING: skipping ${DO_CMDS[*]}: $pack_note"; fi
  fi
fi
have_time=1
[[ -x /usr/bin/time ]] || {
  have_time=0
  log "WARNING: /usr/bin/time not found: peak RSS will be n/a"
}

# ------------------------------------------------------------------ measurements
declare -A R_PAIR_MED R_PAIR_RANGE R_PAIR_N
declare -A R_ROWS R_CMB R_FLOOR R_FLOOR_MB R_FLOOR_MED R_LD R_LD_MB R_LD_MED R_WALL R_WALL_MED R_PRPS R_PRPS_MED R_PMBPS R_RSS R_RATIO R_LD_RATIO
status=0

# The median of numbers given as arguments.
median() { printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

# Percentage of CPU time idle over one second (all CPUs).
idle_pct() {
  local a b
  a=$(awk '/^cpu / { print $5 + $6, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9 }' /proc/stat)
  sleep 1
  b=$(awk '/^cpu / { print $5 + $6, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9 }' /proc/stat)
  awk -v a="$a" -v b="$b" 'BEGIN { split(a, x, " "); split(b, y, " "); printf "%d", 100 * (y[1] - x[1]) / (y[2] - x[2]) }'
}
# Waits (up to BENCH_IDLE_WAIT s) for an idle machine before a measurement; notes it when busy.
busy_notes=()
wait_idle() {
  local what=$1 idle waited=0
  idle=$(idle_pct)
  while ((idle < 90 && waited < BENCH_IDLE_WAIT)); do
    ((waited == 0)) && log "machine busy (${idle}% idle) before $what: waiting up to ${BENCH_IDLE_WAIT}s"
    sleep 4
    waited=$((waited + 5))
    idle=$(idle_pct)
  done
  if ((idle < 90)); then
    log "WARNING: measuring $what on a busy machine (${idle}% idle)"
    busy_notes+=("$what ${idle}%")
  fi
}

PACK_CMD=""
for spec in "${corpora[@]}"; do
  [[ $DO_FLOOR == 1 ]] || break
  name=${spec%%:*}
  dir=$(corpus_dir "$name")
  warm "$dir"

  # Both floors, BENCH_REPEAT times each: zlib-rs streaming (the floor of the older goals) and
  # libdeflate whole-file decompression (issue 15's floor). Best and median are reported.
  for engine in zlib-rs libdeflate; do
    best="" all=()
    for ((i = 1; i <= BENCH_REPEAT; i++)); do
      wait_idle "floor $engine $name #$i"
      out=$("$FLOOR" "$dir" --threads "$BENCH_THREADS" --engine "$engine") || out=""
      log "floor $engine $name #$i: ${out:-failed}"
      [[ -n "$out" ]] || continue
      all+=("$(json_num "$out" rows_per_s)")
      if [[ -z "$best" ]] || awk "BEGIN { exit !($(json_num "$out" rows_per_s) > $(json_num "$best" rows_per_s)) }"; then
        best=$out
      fi
    done
    if [[ -z "$best" ]]; then
      log "ERROR: floor $engine failed on $dir"
      exit 1
    fi
    echo "$best" >"$BENCH_DIR/logs/floor-$engine-$name-$STAMP.json"
    if [[ $engine == zlib-rs ]]; then
      R_ROWS[$name]=$(json_num "$best" rows)
      cbytes=$(json_num "$best" compressed_bytes)
      R_CMB[$name]=$(calc %.1f "$cbytes / 1e6")
      R_FLOOR[$name]=$(json_num "$best" rows_per_s)
      R_FLOOR_MB[$name]=$(json_num "$best" compressed_mb_per_s)
      R_FLOOR_MED[$name]=$(calc %.0f "$(median "${all[@]}")")
    else
      R_LD[$name]=$(json_num "$best" rows_per_s)
      R_LD_MB[$name]=$(json_num "$best" compressed_mb_per_s)
      R_LD_MED[$name]=$(calc %.0f "$(median "${all[@]}")")
    fi
  done

  R_WALL[$name]=n/a R_WALL_MED[$name]=n/a R_PRPS[$name]=n/a R_PRPS_MED[$name]=n/a R_PMBPS[$name]=n/a
  R_RSS[$name]=n/a R_RATIO[$name]=n/a R_LD_RATIO[$name]=n/a
  [[ $pack_ok == 1 && $DO_PACK == 1 ]] || continue

  outdir="$BENCH_DIR/pack-$name"
  best_wall="" max_rss=0 walls=()
  for ((i = 1; i <= BENCH_REPEAT; i++)); do
    # Each run packs into a new folder, as a user's pack does: the previous run's output is
    # removed before, outside the timing (`--overwrite` would time the deletion of a 190 MB
    # shard from the page cache too, about 55 ms on the reference machine).
    rm -rf "$outdir"
    warm "$dir"
    wait_idle "pack $name #$i"
    plog="$BENCH_DIR/logs/pack-$name-$STAMP-$i.log"
    tfile="$BENCH_DIR/logs/pack-$name-$STAMP-$i.time"
    # shellcheck disable=SC2086 # EXTRA_PACK_ARGS is meant to be word-split
    cmd=("$PACKER" pack --input "$dir" --output "$outdir" --workers "$BENCH_THREADS" --quiet $EXTRA_PACK_ARGS)
    log "pack $name #$i: ${cmd[*]}"
    # The first corpus's command line is reported; the others differ only in --input/--output.
    [[ -n "$PACK_CMD" ]] || PACK_CMD="${cmd[*]}"
    start=$(date +%s.%N)
    rc=0
    if [[ $have_time == 1 ]]; then
      /usr/bin/time -v -o "$tfile" "${cmd[@]}" >"$plog" 2>&1 || rc=$?
    else
      "${cmd[@]}" >"$plog" 2>&1 || rc=$?
    fi
    wall=$(calc %.3f "$(date +%s.%N) - $start")
    if [[ $rc != 0 ]]; then
      log "ERROR: pack exited with status $rc; last lines of $plog:"
      tail -n 20 "$plog" >&2
      status=1
      pack_note="${pack_note:+$pack_note; }corpus-$name: pack exited with status $rc (log: $plog)"
      best_wall=""
      break
    fi
    rss=n/a
    if [[ $have_time == 1 ]]; then
      rss=$(sed -nE 's/.*Maximum resident set size \(kbytes\): ([0-9]+).*/\1/p' "$tfile")
      log "pack $name #$i: wall ${wall}s (time -v: $(sed -nE 's/.*Elapsed.*: ([0-9:.]+)$/\1/p' "$tfile")), max RSS ${rss} KiB"
      if ((rss > max_rss)); then max_rss=$rss; fi
    else
      log "pack $name #$i: wall ${wall}s"
    fi
    walls+=("$wall")
    if [[ -z "$best_wall" ]] || awk "BEGIN { exit !($wall < $best_wall) }"; then
      best_wall=$wall
    fi
  done
  [[ -n "$best_wall" ]] || continue

  R_WALL[$name]=$(calc %.2f "$best_wall")
  R_WALL_MED[$name]=$(calc %.2f "$(median "${walls[@]}")")
  R_PRPS[$name]=$(calc %.0f "${R_ROWS[$name]} / $best_wall")
  R_PRPS_MED[$name]=$(calc %.0f "${R_ROWS[$name]} / ${R_WALL_MED[$name]}")
  R_PMBPS[$name]=$(calc %.1f "$cbytes / 1e6 / $best_wall")
  if [[ $have_time == 1 ]]; then R_RSS[$name]=$(calc %.1f "$max_rss / 1024"); fi
  R_RATIO[$name]=$(calc %.1f "100 * ${R_PRPS[$name]} / ${R_FLOOR[$name]}")
  R_LD_RATIO[$name]=$(calc %.1f "100 * ${R_PRPS[$name]} / ${R_LD[$name]}")

  # Paired: this machine's speed drifts over minutes (a shared VM), so best-of-N floor and
  # best-of-N pack taken minutes apart can be compared at different speeds. Here each pack run
  # comes right after a libdeflate floor run, and the ratio is taken pair by pair.
  ratios=()
  for ((i = 1; i <= BENCH_REPEAT; i++)); do
    rm -rf "$outdir"
    warm "$dir"
    wait_idle "pair $name #$i"
    out=$("$FLOOR" "$dir" --threads "$BENCH_THREADS" --engine libdeflate) || out=""
    [[ -n "$out" ]] || continue
    start=$(date +%s.%N)
    "${cmd[@]}" >"$BENCH_DIR/logs/pair-$name-$STAMP-$i.log" 2>&1 || continue
    wall=$(calc %.3f "$(date +%s.%N) - $start")
    ratios+=("$(calc %.1f "100 * ${R_ROWS[$name]} / $wall / $(json_num "$out" rows_per_s)")")
    log "pair $name #$i: floor $(json_num "$out" rows_per_s) rows/s, pack ${wall}s -> ${ratios[-1]}%"
  done
  if ((${#ratios[@]} > 0)); then
    R_PAIR_MED[$name]=$(median "${ratios[@]}")
    R_PAIR_RANGE[$name]="$(printf '%s\n' "${ratios[@]}" | sort -g | head -1)-$(printf '%s\n' "${ratios[@]}" | sort -g | tail -1)"
    R_PAIR_N[$name]=${#ratios[@]}
  fi
done

# ------------------------------------------------------------------ long games (issue 15)
# Peak RSS of pack on runs of 60000 steps (≈14 MB of JSON each, as a game that reaches 65536
# would log) at 1, 2, 4, 8 and 16 workers: a worker must not hold a whole decompressed run.
LONG_SECTION=""
if [[ $DO_LONG == 1 && $pack_ok == 1 ]]; then
  long_dir="$BENCH_DIR/corpus-long"
  [[ "$BENCH_LAYOUT" == "$DEFAULT_LAYOUT" ]] || long_dir="$long_dir-${BENCH_LAYOUT//:/}"
  log "corpus $long_dir: 32 runs x 60000 rows, layout $BENCH_LAYOUT"
  "$CORPUS_GEN" --out "$long_dir" --runs 32 --rows-per-run 60000 --threads "$BENCH_GEN_THREADS" \
    --layout "$BENCH_LAYOUT" >&2
  declare -A L_RSS L_WALL
  long_cmd=""
  for w in 1 2 4 8 16; do
    L_RSS[$w]=0 L_WALL[$w]=""
    for ((i = 1; i <= BENCH_REPEAT; i++)); do
      warm "$long_dir"
      wait_idle "long pack --workers $w #$i"
      tfile="$BENCH_DIR/logs/long-$STAMP-w$w-$i.time"
      cmd=("$PACKER" pack --input "$long_dir" --output "$BENCH_DIR/pack-long" --workers "$w" --overwrite --quiet)
      long_cmd="${cmd[*]}"
      start=$(date +%s.%N)
      if ! /usr/bin/time -v -o "$tfile" "${cmd[@]}" >"$BENCH_DIR/logs/long-$STAMP-w$w-$i.log" 2>&1; then
        log "ERROR: long pack --workers $w failed (log: $BENCH_DIR/logs/long-$STAMP-w$w-$i.log)"
        status=1
        break
      fi
      wall=$(calc %.3f "$(date +%s.%N) - $start")
      rss=$(sed -nE 's/.*Maximum resident set size \(kbytes\): ([0-9]+).*/\1/p' "$tfile")
      log "long pack --workers $w #$i: wall ${wall}s, max RSS $rss KiB"
      ((rss > L_RSS[$w])) && L_RSS[$w]=$rss
      if [[ -z "${L_WALL[$w]}" ]] || awk "BEGIN { exit !($wall < ${L_WALL[$w]}) }"; then L_WALL[$w]=$wall; fi
    done
  done
  rss_mib() { calc %.1f "${L_RSS[$1]} / 1024"; }
  per_worker=$(calc %.1f "(${L_RSS[16]} - ${L_RSS[1]}) / 15 / 1024")
  LONG_SECTION="== long games: $long_dir (32 runs x 60000 rows), peak RSS (largest of $BENCH_REPEAT), wall (best)
command: $long_cmd (--workers 1, 2, 4, 8, 16)
$(for w in 1 2 4 8 16; do printf '  --workers %-3s %8s MiB %8s s\n' "$w" "$(rss_mib "$w")" "${L_WALL[$w]}"; done)
per extra worker (16 vs 1): $per_worker MiB
goal peak RSS <= 64 MiB at --workers 2: $(rss_mib 2) MiB -> $(awk "BEGIN { print ($(rss_mib 2) <= 64) ? \"PASS\" : \"FAIL\" }")
goal <= 16 MiB per extra worker: $per_worker MiB -> $(awk "BEGIN { print ($per_worker <= 16) ? \"PASS\" : \"FAIL\" }")"
elif [[ $DO_LONG == 1 ]]; then
  LONG_SECTION="== long games: NOT MEASURED: $pack_note"
fi

# ------------------------------------------------------------------ command benchmarks
# bench/cmds.sh: one function per mode, each appending a report section to CMD_SECTIONS.
# shellcheck source=bench/cmds.sh
source bench/cmds.sh
if [[ $pack_ok == 1 ]]; then
  for m in "${DO_CMDS[@]}"; do "bench_$m"; done
else
  for m in "${DO_CMDS[@]}"; do mode_failed "$m" "$pack_note"; done
fi

# ------------------------------------------------------------------ report
report="$BENCH_DIR/results-$STAMP.txt"
{
  echo "machine: nproc=$(nproc), cpu=$(sed -nE 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1)," \
    "mem=$(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo), kernel=$(uname -r)"
  commit=$(git rev-parse --short HEAD 2>/dev/null || echo none)
  if [[ $commit != none ]] && ! git diff --quiet HEAD -- 2>/dev/null; then commit="$commit (dirty)"; fi
  echo "build: $(rustc -V 2>/dev/null || echo 'rustc ?'), commit $commit, packer $PACKER"
  echo "threads: floor $BENCH_THREADS, pack --workers $BENCH_THREADS${EXTRA_PACK_ARGS:+, EXTRA_PACK_ARGS='$EXTRA_PACK_ARGS'}; repeat $BENCH_REPEAT"
  echo "modes: $([[ $DO_FLOOR == 1 ]] && echo -n "floor ")$([[ $DO_PACK == 1 ]] && echo -n "pack ")$([[ $DO_LONG == 1 ]] && echo -n "long ")${DO_CMDS[*]}"
  for spec in "${corpora[@]}"; do
    n=${spec%%:*}
    totals=$(sed -n 2p "$(corpus_dir "$n")/.complete" 2>/dev/null || true)
    echo "corpus-$n: $(corpus_dir "$n"), $(sed -nE 's/.*"rows_layout":"([^"]*)".*/\1/p' <<<"$totals") rows" \
      "at depth $(sed -nE 's/.*"depth":"([^"]*)".*/\1/p' <<<"$totals"), layout $(sed -nE 's/.*"layout":"([^"]*)".*/\1/p' <<<"$totals")," \
      "$(json_num "$totals" json_bytes_per_row) JSON bytes/row, gzip ratio $(json_num "$totals" ratio)," \
      "$(json_num "$totals" tuple_rows_pct)% tuple rows"
  done
  if [[ -n "$pack_note" && $DO_PACK == 1 ]]; then echo "pack: NOT MEASURED: $pack_note"; fi
  if ((${#busy_notes[@]} > 0)); then
    echo "BUSY MACHINE, figures unreliable: <90% idle before: ${busy_notes[*]}"
  fi
  if [[ $DO_FLOOR == 1 ]]; then
    echo
    if [[ -n "$PACK_CMD" ]]; then
      echo "pack command: $PACK_CMD (each corpus-X into pack-X)"
    fi
    echo "best of $BENCH_REPEAT (median in the *_med columns); pack/flr and pack/ld compare best with best"
    fmt="%-17s %10s %8s %7s %7s %12s %12s %9s %8s %12s %12s %8s %12s %12s %8s\n"
    # shellcheck disable=SC2059
    printf "$fmt" corpus rows comp_MB pack_s pk_med pack_rows/s pk_med_r/s pack_MB/s pack_MiB \
      floor_rows/s flr_med_r/s pack/flr ld_rows/s ld_med_r/s pack/ld
    for spec in "${corpora[@]}"; do
      n=${spec%%:*}
      ratio=${R_RATIO[$n]} ld_ratio=${R_LD_RATIO[$n]}
      [[ $ratio == n/a ]] || ratio="$ratio%"
      [[ $ld_ratio == n/a ]] || ld_ratio="$ld_ratio%"
      # shellcheck disable=SC2059
      printf "$fmt" "corpus-$n" "${R_ROWS[$n]}" "${R_CMB[$n]}" "${R_WALL[$n]}" "${R_WALL_MED[$n]}" \
        "${R_PRPS[$n]}" "${R_PRPS_MED[$n]}" "${R_PMBPS[$n]}" "${R_RSS[$n]}" "${R_FLOOR[$n]}" \
        "${R_FLOOR_MED[$n]}" "$ratio" "${R_LD[$n]}" "${R_LD_MED[$n]}" "$ld_ratio"
    done
    for spec in "${corpora[@]}"; do
      n=${spec%%:*}
      echo "floors corpus-$n: zlib-rs ${R_FLOOR_MB[$n]} MB/s, libdeflate ${R_LD_MB[$n]} MB/s compressed input (best)"
    done
    if [[ $pack_ok == 1 && ${R_RATIO[4m]} != n/a ]]; then
      echo
      verdict() { if awk "BEGIN { exit !($1) }"; then echo PASS; else echo FAIL; fi; }
      echo "goal pack >= 80% of floor rows/s (4M): ${R_RATIO[4m]}% -> $(verdict "${R_RATIO[4m]} >= 80")"
      echo "goal pack >= 50% of libdeflate floor rows/s (4M, issue 15), best vs best: ${R_LD_RATIO[4m]}% -> $(verdict "${R_LD_RATIO[4m]} >= 50")"
      # Issue 15's goal on each row layout (issue 21): the current logger's rows at both depth
      # sizes, and the design notes' rows.
      for spec in "${corpora[@]}"; do
        IFS=: read -r n _ rows depths <<<"$spec"
        [[ -n "${R_PAIR_MED[$n]:-}" ]] || continue
        echo "goal pack >= 50% of libdeflate floor rows/s (corpus-$n: $rows rows, depth $depths), median of ${R_PAIR_N[$n]} back-to-back pairs: ${R_PAIR_MED[$n]}% (range ${R_PAIR_RANGE[$n]}%) -> $(verdict "${R_PAIR_MED[$n]} >= 50")"
      done
      if [[ ${R_RSS[4m]} != n/a ]]; then
        echo "goal peak RSS <= 64 MiB (4M): ${R_RSS[4m]} MiB -> $(verdict "${R_RSS[4m]} <= 64")"
      fi
      if [[ -n "${R_RSS[8m]:-}" && ${R_RSS[8m]} != n/a && ${R_RSS[4m]} != n/a ]]; then
        echo "goal pack >= 80% of floor rows/s (8M): ${R_RATIO[8m]}% -> $(verdict "${R_RATIO[8m]} >= 80")"
        echo "goal peak RSS at 8M within 10% of 4M: ${R_RSS[8m]} vs ${R_RSS[4m]} MiB -> $(verdict "${R_RSS[8m]} <= 1.10 * ${R_RSS[4m]}")"
      fi
    fi
  fi
  if [[ -n "$LONG_SECTION" ]]; then
    echo
    echo "$LONG_SECTION"
  fi
  for sec in "${CMD_SECTIONS[@]}"; do
    echo
    printf '%s\n' "${sec%$'\n'}"
  done
} | tee "$report"
log "report saved to $report (logs in $BENCH_DIR/logs)"
exit $status
