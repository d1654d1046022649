#!/usr/bin/env bash
# Nothing slower, nothing different (issue 31): runs every command of two binaries on the same
# inputs, compares what they wrote byte for byte, and times each command.
#
#   bench/same_output.sh OLD_BINARY NEW_BINARY
#
# The sequence (see `sequence` below) packs the fixture drop and a generated drop of the current
# logger's rows (bench_corpus, 40 runs x 20 000 rows, depths 6-7, with --search-stats), then
# runs on those packs: pack --update, pack --partition and merge, shuffle --seed (with and
# without a companion), validate (text, --json, --deep), stats (text, --json, --where,
# --version), show (text, --json, --last, --version), export (jsonl file and folder, parquet
# file and folder, pack), attach, detach, versions, tag (and --delete), report, and a pack of
# the exported jsonl. Each step runs with each binary in turn, in the same folder (the two
# states are renamed in and out of it), so the paths a pack records are the same.
#
# What is compared (bench/same_output.py): the list of files; every shard, companion, npy,
# parquet, jsonl and json file with a byte comparison; metadata.db table by table (schema,
# then every row); each command's stdout, stderr and exit status; the HTML reports. Masked,
# because two runs differ there by design: UTC times, the binary's path in the recorded command
# lines, pack ids (numbered by first appearance, so a wrong source id still shows), and
# durations and rates on stdout.
#
# The sequence runs SAME_OUTPUT_REPEAT times (default 3), each time from scratch, old first on
# odd repetitions and new first on even ones. Every tree (old and new, every repetition) is
# compared with the first repetition's old tree, so the result also says each binary is
# deterministic. The timing table gives each command's best wall time per binary and new/old.
#
# Environment: SAME_OUTPUT_DIR (default target/bench/same-output; wiped at start),
# SAME_OUTPUT_REPEAT (3), SAME_OUTPUT_RUNS (40: runs of 20 000 rows in the generated drop; the
# drop is generated once, under target/bench/same-output-corpus), SAME_OUTPUT_WORKERS (2).
# Exit status 1 on any difference or if a command's exit status differs. Needs python3.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $# == 2 ]] || {
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
  exit 2
}
OLD=$(realpath "$1")
NEW=$(realpath "$2")
REPEAT=${SAME_OUTPUT_REPEAT:-3}
RUNS=${SAME_OUTPUT_RUNS:-40}
W=${SAME_OUTPUT_WORKERS:-2}
WORK=${SAME_OUTPUT_DIR:-target/bench/same-output}
mkdir -p "$(dirname "$WORK")"
# One run at a time in a folder: a second one would wipe the first one's inputs.
exec 9>"$WORK.lock"
flock -n 9 || {
  echo "same_output.sh: another run is using $WORK" >&2
  exit 2
}
rm -rf "$WORK"
mkdir -p "$WORK/in"
WORK=$(realpath "$WORK")
HERE=$(pwd)
COMPARE=(python3 "$HERE/bench/same_output.py")
log() { echo "[same-output] $*" >&2; }

# ---- inputs (shared by both binaries, read-only)
CORPUS=$HERE/target/bench/same-output-corpus/big-$RUNS
if [[ ! -x target/release/examples/bench_corpus ]]; then
  cargo build --release --example bench_corpus >&2
fi
log "generated drop: $CORPUS ($RUNS runs x 20000 rows; generated once)"
target/release/examples/bench_corpus --out "$CORPUS" --runs "$RUNS" --rows-per-run 20000 \
  --threads 2 --rows current --depth 6-7 >/dev/null
IN=$WORK/in
cp -r fixtures/raw "$IN/raw"
# The first half of the generated runs (by path), linked: the base that `pack --update` adds to.
mkdir -p "$IN/big-half"
mapfile -t bases < <(cd "$CORPUS" && find . -name '*.meta.json' | sort | sed 's/\.meta\.json$//')
for b in "${bases[@]:0:$((${#bases[@]} / 2))}"; do
  mkdir -p "$IN/big-half/$(dirname "$b")"
  ln -s "$CORPUS/$b.meta.json" "$IN/big-half/$b.meta.json"
  ln -s "$CORPUS/$b.jsonl.gz" "$IN/big-half/$b.jsonl.gz"
done

# ---- running a step with both binaries
TIMES=$WORK/times.txt
: >"$TIMES"
REP=0
ORDER=(old new)
# The working folder both binaries run in: each side's state is renamed to it for its step.
CUR=$WORK/cur

# run_side SIDE NAME ARGS...: the binary of SIDE with ARGS in $CUR; stdout, stderr and exit
# status to out/NAME.*; the wall time to $TIMES.
run_side() {
  local side=$1 name=$2 bin=$OLD start end rc
  shift 2
  [[ $side == new ]] && bin=$NEW
  mv "$WORK/r$REP-$side" "$CUR"
  cd "$CUR"
  start=$(date +%s%N)
  rc=0
  "$bin" "$@" >"out/$name.out" 2>"out/$name.err" || rc=$?
  end=$(date +%s%N)
  echo "$rc" >"out/$name.rc"
  cd "$HERE"
  mv "$CUR" "$WORK/r$REP-$side"
  echo "$name $side $REP $(awk "BEGIN { printf \"%.4f\", ($end - $start) / 1e9 }")" >>"$TIMES"
  [[ $rc == 0 ]] || log "  $name ($side) exited with status $rc: $(head -c 300 "$WORK/r$REP-$side/out/$name.err")"
}

# step NAME ARGS...: `BINARY ARGS...` with each binary, in this repetition's order.
step() {
  local side
  for side in "${ORDER[@]}"; do run_side "$side" "$@"; done
}

# prep COMMAND...: a shell command (not timed, not a binary's) run in each side's folder.
prep() {
  local side
  for side in old new; do
    mv "$WORK/r$REP-$side" "$CUR"
    (cd "$CUR" && eval "$*")
    mv "$CUR" "$WORK/r$REP-$side"
  done
}

sequence() {
  # The fixture drop.
  step pack-fx pack --input "$IN/raw" --output fx --workers "$W" --quiet
  step pack-fx-search pack --input "$IN/raw" --output fxs --search-stats --shard-rows 500 \
    --workers "$W" --quiet --json
  step validate-fx validate fx --workers "$W" --quiet
  step validate-fxs-deep validate fxs --deep --json --workers "$W" --quiet
  step stats-fx stats fx --workers "$W"
  step stats-fxs-json stats fxs --json --workers "$W"
  step show-fx show fx --run 3 --limit 5
  step show-fxs-last show fxs --run 7 --last 4 --json
  prep "${COMPARE[*]} array emb-fx.npy fxs 8"
  step attach-fxs attach fxs --name emb --from emb-fx.npy --quiet --json
  step tag-fxs-v1 tag fxs first --version 1 --json
  step tag-fxs-latest tag fxs with-emb
  step versions-fxs versions fxs
  step versions-fxs-json versions fxs --json
  step stats-fxs-v1 stats fxs --version first --workers "$W"
  step show-fxs-v1 show fxs --version 1 --run 2 --limit 3
  step validate-fxs validate fxs --workers "$W" --quiet
  step detach-fxs detach fxs --name emb --json
  step untag-fxs tag fxs with-emb --delete --json
  step export-fx-jsonl-file export fx --format jsonl --output fx.jsonl.gz --workers "$W" --quiet
  step export-fx-jsonl-dir export fxs --format jsonl --output fx-jsonl --workers "$W" --quiet
  step pack-fx-roundtrip pack --input fx-jsonl --output fx-roundtrip --workers "$W" --quiet --json
  step export-fx-pack export fxs --format pack --where "depth = 7" --output fx-deep --workers "$W" --quiet
  step export-fx-parquet export fx --format parquet --output fx.parquet --run-columns --workers "$W" --quiet

  # The generated drop.
  step pack-big pack --input "$CORPUS" --output big --search-stats --shard-rows 300000 \
    --workers "$W" --quiet --json
  step pack-big-half pack --input "$IN/big-half" --output upd --search-stats --shard-rows 300000 \
    --workers "$W" --quiet --json
  step pack-big-update pack --input "$CORPUS" --output upd --update --search-stats --workers "$W" --quiet --json
  step pack-big-part0 pack --input "$CORPUS" --output p0 --partition 0/2 --search-stats \
    --shard-rows 300000 --workers "$W" --quiet
  step pack-big-part1 pack --input "$CORPUS" --output p1 --partition 1/2 --search-stats \
    --shard-rows 300000 --workers "$W" --quiet
  step merge-big merge p0 p1 --output merged --workers "$W" --quiet --json
  step shuffle-big shuffle big --output shuf --seed 7 --memory 64MiB --workers "$W" --quiet --json
  step validate-big validate big --workers "$W" --quiet
  step validate-merged-json validate merged --json --workers "$W" --quiet
  step validate-shuf validate shuf --workers "$W" --quiet
  step stats-big stats big --workers "$W"
  step stats-big-json stats big --json --workers "$W"
  step stats-big-where stats big --where "depth = 7 AND max_score > ?" --param 20000 --json --workers "$W"
  step stats-shuf stats shuf --workers "$W"
  step show-big show big --run $((RUNS / 2)) --from 100 --limit 5
  step show-merged-json show merged --run $((RUNS - 1)) --limit 3 --json
  step export-big-parquet export big --format parquet --output big.parquet --workers "$W" --quiet
  step export-big-parquet-dir export merged --format parquet --output big-pq --where "depth = 6" \
    --run-columns --workers "$W" --quiet
  step export-big-jsonl export big --format jsonl --output big-jsonl --runs 0-3 --workers "$W" --quiet
  step export-big-pack export big --format pack --where "depth = 6" --output big-d6 --workers "$W" --quiet
  prep "${COMPARE[*]} array emb-big.npy big 4"
  step attach-big attach big --name emb --from emb-big.npy --quiet --json
  step shuffle-big-emb shuffle big --output shuf-emb --seed 3 --memory 64MiB --workers "$W" --quiet
  step versions-big-json versions big --json
  step report-fx report fx fxs --output report-fx.html --workers "$W" --quiet
  step report-big report big merged --where "depth = 6" --output report-big.html --workers "$W" --quiet
  step report-big-v1 report big --version 1 --output report-big-v1.html --workers "$W" --quiet
}

status=0
for ((REP = 1; REP <= REPEAT; REP++)); do
  if ((REP % 2)); then ORDER=(old new); else ORDER=(new old); fi
  log "repetition $REP of $REPEAT (${ORDER[0]} first)"
  for side in old new; do
    rm -rf "$WORK/r$REP-$side"
    mkdir -p "$WORK/r$REP-$side/out"
  done
  sequence
  # Every tree against the first repetition's old one.
  for side in old new; do
    [[ $REP == 1 && $side == old ]] && continue
    echo "== r$REP-$side against r1-old"
    if "${COMPARE[@]}" compare "$WORK/r1-old" "$WORK/r$REP-$side" --binary "$OLD" --binary "$NEW"; then
      [[ $REP == 1 ]] || rm -rf "$WORK/r$REP-$side" # keep what differs, for a look
    else
      status=1
    fi
  done
done

echo
echo "old: $OLD"
echo "new: $NEW"
echo "best of $REPEAT, each command run old and new in turn; machine: nproc=$(nproc), load $(cut -d' ' -f1-3 /proc/loadavg)"
"${COMPARE[@]}" table "$TIMES"
echo
if [[ $status == 0 ]]; then
  echo "SAME: every command's output identical ($((REPEAT * 2 - 1)) trees compared with the first)"
else
  echo "DIFFERENT: see DIFFER lines above (trees kept in $WORK)"
fi
exit $status
