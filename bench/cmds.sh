# shellcheck shell=bash
# Benchmarks of the pack-level commands (validate, merge, shuffle, stats, show, export), one per
# performance goal of the issues. Sourced by bench/run.sh, which provides: log, calc, wait_idle,
# warm, corpus_dir, busy_notes, status, have_time, PACKER, BENCH_DIR, BENCH_THREADS, BENCH_REPEAT,
# EXTRA_PACK_ARGS, STAMP. Each bench_<mode> function measures and appends one report section
# (command lines, table, goal lines) to CMD_SECTIONS. See bench/README.md ("Command benchmarks").

CMD_SECTIONS=()
BENCH_SHOW_RUNS=${BENCH_SHOW_RUNS:-10}
PACK4M="$BENCH_DIR/pack-4m"
PACK4M_ROWS=4000000

verdict() { if awk "BEGIN { exit !($1) }"; then echo PASS; else echo FAIL; fi; }

# Shard files of a pack, in order (steps.npy or steps-NNNNN.npy).
shard_files() { find "$1" -maxdepth 1 -name 'steps*.npy' -type f | sort; }
# Total bytes of a pack's shards (header included: what is on disk and in page cache).
shard_bytes() {
  local total=0 f
  while read -r f; do total=$((total + $(stat -c %s "$f"))); done < <(shard_files "$1")
  echo "$total"
}
# Rows of a pack: the sum of the shapes in the shard headers (0 when there is no pack).
pack_rows() {
  local total=0 f n
  while read -r f; do
    n=$(head -c 4096 "$f" | tr -d '\0' | grep -ao "'shape': *([0-9]*" | grep -o '[0-9]*$' || true)
    total=$((total + ${n:-0}))
  done < <(shard_files "$1")
  echo "$total"
}
warm_pack() {
  local f
  for f in "$@"; do shard_files "$f" | xargs -r cat >/dev/null; done
}

# measure NAME PREP -- CMD...
#   Runs CMD BENCH_REPEAT times (stdout+stderr to a log). Before each run: PREP (a function name or
#   "none"; untimed: clean the output, warm the inputs), then wait_idle. Wall time from
#   $EPOCHREALTIME around the command (includes /usr/bin/time's own fork/exec, ~1-2 ms), peak RSS from
#   `/usr/bin/time -v`. Sets M_WALL (fastest, s), M_RSS (largest, MiB, or n/a), M_RC (0 or the first
#   failing exit status), M_LOG (log of the last run), M_CMD (the command line).
measure() {
  local name=$1 prep=$2 i start end rc rss max_rss=0 tfile wall
  shift 3
  M_CMD="$*" M_WALL="" M_RSS=n/a M_RC=0
  for ((i = 1; i <= BENCH_REPEAT; i++)); do
    [[ $prep == none ]] || "$prep"
    wait_idle "$name #$i"
    M_LOG="$BENCH_DIR/logs/$name-$STAMP-$i.log"
    tfile="$BENCH_DIR/logs/$name-$STAMP-$i.time"
    log "$name #$i: $*"
    rc=0
    start=$EPOCHREALTIME
    if [[ $have_time == 1 ]]; then
      /usr/bin/time -v -o "$tfile" "$@" >"$M_LOG" 2>&1 || rc=$?
    else
      "$@" >"$M_LOG" 2>&1 || rc=$?
    fi
    end=$EPOCHREALTIME
    if [[ $rc != 0 ]]; then
      log "ERROR: $name exited with status $rc; last lines of $M_LOG:"
      tail -n 20 "$M_LOG" >&2
      M_RC=$rc
      return 0
    fi
    wall=$(calc %.4f "$end - $start")
    if [[ $have_time == 1 ]]; then
      rss=$(sed -nE 's/.*Maximum resident set size \(kbytes\): ([0-9]+).*/\1/p' "$tfile")
      if ((rss > max_rss)); then max_rss=$rss; fi
      M_RSS=$(calc %.1f "$max_rss / 1024")
      log "$name #$i: wall ${wall}s, max RSS ${rss} KiB"
    else
      log "$name #$i: wall ${wall}s"
    fi
    if [[ -z "$M_WALL" ]] || awk "BEGIN { exit !($wall < $M_WALL) }"; then M_WALL=$wall; fi
  done
}

# Runs a preparation command (not measured), logging it; a failure fails the mode.
prepare() {
  local name=$1 plog start
  shift
  plog="$BENCH_DIR/logs/prep-$name-$STAMP.log"
  log "prepare $name: $*"
  start=$EPOCHREALTIME
  if ! "$@" >"$plog" 2>&1; then
    log "ERROR: preparing $name failed; last lines of $plog:"
    tail -n 20 "$plog" >&2
    return 1
  fi
  log "prepare $name: done in $(calc %.2f "$EPOCHREALTIME - $start") s"
}

# A failed mode: one section saying why, and exit status 1.
mode_failed() {
  CMD_SECTIONS+=("== $1: NOT MEASURED: $2")
  status=1
}

# The 4M-row pack every mode reads: the one the pack step wrote, rebuilt (same pack command line)
# when it is missing, does not hold 4M rows, or is older than the binary being measured.
PACK4M_STATE=""
ensure_pack4m() {
  [[ -z "$PACK4M_STATE" ]] || { [[ $PACK4M_STATE == ok ]]; return; }
  local why="" rows
  if [[ ! -f "$PACK4M/metadata.db" ]]; then
    why="missing"
  elif rows=$(pack_rows "$PACK4M") && [[ $rows != "$PACK4M_ROWS" ]]; then
    why="holds $rows rows, not $PACK4M_ROWS"
  elif [[ "$PACKER" -nt "$PACK4M/metadata.db" ]]; then
    why="older than $PACKER"
  fi
  if [[ -n "$why" ]]; then
    log "$PACK4M: $why; packing it"
    warm "$(corpus_dir 4m)"
    # shellcheck disable=SC2086 # EXTRA_PACK_ARGS is meant to be word-split
    if ! prepare pack-4m "$PACKER" pack --input "$(corpus_dir 4m)" --output "$PACK4M" \
      --workers "$BENCH_THREADS" --overwrite --quiet $EXTRA_PACK_ARGS; then
      PACK4M_STATE=failed
      return 1
    fi
  fi
  PACK4M_STATE=ok
}

need_cmd() { # need_cmd MODE SUBCOMMAND: the binary has it, and the 4M pack is there
  if ! "$PACKER" "$2" --help >/dev/null 2>&1; then
    mode_failed "$1" "'$PACKER $2 --help' fails: subcommand not available"
    return 1
  fi
  if ! ensure_pack4m; then
    mode_failed "$1" "could not build $PACK4M (see logs/prep-pack-4m-$STAMP.log)"
    return 1
  fi
}

# ------------------------------------------------------------------ validate (issue 3)
bench_validate() {
  need_cmd validate validate || return 0
  local bytes mb rows deep sec="" fmt walls=() rsss=() rcs=() cmds=() labels=("validate" "validate --deep")
  bytes=$(shard_bytes "$PACK4M") rows=$(pack_rows "$PACK4M")
  mb=$(calc %.1f "$bytes / 1e6")
  prep_validate() { warm_pack "$PACK4M"; }
  for deep in "" --deep; do
    # shellcheck disable=SC2086 # $deep is empty or one word
    measure "validate${deep:+-deep}" prep_validate -- "$PACKER" validate "$PACK4M" $deep --workers "$BENCH_THREADS"
    cmds+=("$M_CMD") walls+=("${M_WALL:-n/a}") rsss+=("$M_RSS") rcs+=("$M_RC")
    if [[ $M_RC != 0 ]]; then status=1; fi
  done
  fmt="%-16s %10s %9s %9s %9s %9s %9s\n"
  sec+="== validate (issue 3): $rows rows, $(shard_files "$PACK4M" | wc -l) shard(s), $mb MB of shards, page cache warm"$'\n'
  for deep in 0 1; do sec+="command: ${cmds[$deep]}"$'\n'; done
  sec+=$'\n'"$(printf "$fmt" command rows shard_MB wall_s GB/s peak_MiB exit)"$'\n'
  local gbs=() i
  for i in 0 1; do
    if [[ ${rcs[$i]} == 0 ]]; then gbs[i]=$(calc %.3f "$bytes / 1e9 / ${walls[$i]}"); else gbs[i]=n/a; fi
    # shellcheck disable=SC2059
    sec+="$(printf "$fmt" "${labels[$i]}" "$rows" "$mb" "${walls[$i]}" "${gbs[$i]}" "${rsss[$i]}" "${rcs[$i]}")"$'\n'
  done
  sec+=$'\n'
  local runs
  runs=$(sqlite3 "file:$PACK4M/metadata.db?mode=ro" 'SELECT count(*) FROM runs' 2>/dev/null || echo '?')
  for i in 0 1; do
    if [[ ${rcs[$i]} != 0 ]]; then
      sec+="goal ${labels[$i]}: exit status ${rcs[$i]} (1 = pack invalid; see its log in $BENCH_DIR/logs) -> FAIL"$'\n'
      continue
    fi
    if [[ $i == 0 ]]; then
      sec+="goal validate >= 1 GB/s of shard bytes: ${gbs[0]} GB/s -> $(verdict "${gbs[0]} >= 1")"$'\n'
    else
      sec+="goal validate --deep >= 300 MB/s of shard bytes: $(calc %.0f "${gbs[1]} * 1000") MB/s -> $(verdict "${gbs[1]} >= 0.3")"$'\n'
    fi
    if [[ ${rsss[$i]} != n/a ]]; then
      sec+="goal ${labels[$i]} peak RSS <= 100 MiB + O(runs) ($runs runs): ${rsss[$i]} MiB -> $(verdict "${rsss[$i]} <= 100")"$'\n'
    fi
  done
  CMD_SECTIONS+=("$sec")
}

# alternate_cat_and_merge NAME CATOUT OUT P0 P1 -- FILES...
#   `cat FILES > CATOUT` and `merge --left P0 --right P1 --output OUT` alternate (cat #1, merge
#   #1, cat #2, ...) so both see the same machine state; the outputs are removed and the inputs
#   warmed before each run (untimed), dirty pages flushed by sync. Sets CAT_WALL, CAT_RSS (MiB or
#   n/a), CAT_RC, CAT_CMD and MERGE_WALL, MERGE_RSS, MERGE_RC, MERGE_CMD (fastest walls, largest
#   RSS).
alternate_cat_and_merge() {
  local name=$1 catout=$2 out=$3 p0=$4 p1=$5 i
  shift 6
  local in_files=("$@")
  prep_cat() { rm -f "$catout"; sync; warm_pack "$p0" "$p1"; cat "${in_files[@]}" >/dev/null; }
  prep_merge() { rm -rf "$out"; sync; warm_pack "$p0" "$p1"; cat "${in_files[@]}" >/dev/null; }
  CAT_WALL="" MERGE_WALL="" MERGE_RC=0 CAT_RC=0 MERGE_RSS=0 MERGE_CMD=""
  local cat_rss=0 repeat=$BENCH_REPEAT
  CAT_CMD="cat ${in_files[*]} > $catout"
  BENCH_REPEAT=1
  for ((i = 1; i <= repeat; i++)); do
    prep_cat
    wait_idle "$name-cat #$i"
    log "$name-cat #$i: $CAT_CMD"
    local start end t="$BENCH_DIR/logs/$name-cat-$STAMP-$i.time" rc=0
    start=$EPOCHREALTIME
    if [[ $have_time == 1 ]]; then
      /usr/bin/time -v -o "$t" cat "${in_files[@]}" >"$catout" || rc=$?
    else
      cat "${in_files[@]}" >"$catout" || rc=$?
    fi
    end=$EPOCHREALTIME
    if [[ $rc != 0 ]]; then CAT_RC=$rc; break; fi
    local w
    w=$(calc %.4f "$end - $start")
    log "$name-cat #$i: wall ${w}s"
    if [[ -z "$CAT_WALL" ]] || awk "BEGIN { exit !($w < $CAT_WALL) }"; then CAT_WALL=$w; fi
    if [[ $have_time == 1 ]]; then
      local r
      r=$(sed -nE 's/.*Maximum resident set size \(kbytes\): ([0-9]+).*/\1/p' "$t")
      if ((r > cat_rss)); then cat_rss=$r; fi
    fi

    measure "$name-$i" prep_merge -- "$PACKER" merge --left "$p0" --right "$p1" --output "$out" --overwrite --quiet
    MERGE_CMD=$M_CMD
    if [[ $M_RC != 0 ]]; then MERGE_RC=$M_RC; break; fi
    if [[ -z "$MERGE_WALL" ]] || awk "BEGIN { exit !($M_WALL < $MERGE_WALL) }"; then MERGE_WALL=$M_WALL; fi
    if [[ $M_RSS != n/a ]] && awk "BEGIN { exit !($M_RSS > $MERGE_RSS) }"; then MERGE_RSS=$M_RSS; fi
  done
  BENCH_REPEAT=$repeat
  # For information: cat followed by an fsync of its output, since merge syncs what it writes
  # before publishing (on a VM whose disk writes slower than memory, this is the fair floor).
  prep_cat
  local start=$EPOCHREALTIME
  cat "${in_files[@]}" >"$catout" && sync "$catout"
  CATSYNC_WALL=$(calc %.4f "$EPOCHREALTIME - $start")
  log "$name-cat+sync: wall ${CATSYNC_WALL}s"
  rm -f "$catout"
  CAT_RSS=n/a
  if [[ $have_time == 1 ]]; then CAT_RSS=$(calc %.1f "$cat_rss / 1024"); else MERGE_RSS=n/a; fi
}

# ------------------------------------------------------------------ merge (issue 4)
bench_merge() {
  need_cmd merge merge || return 0
  local corpus p0="$BENCH_DIR/pack-4m-p0" p1="$BENCH_DIR/pack-4m-p1" out="$BENCH_DIR/merge-4m"
  local catout="$BENCH_DIR/merge-4m-cat.npy" i part
  corpus=$(corpus_dir 4m)
  warm "$corpus"
  for part in 0 1; do
    # shellcheck disable=SC2086 # EXTRA_PACK_ARGS is meant to be word-split
    prepare "pack-4m-p$part" "$PACKER" pack --input "$corpus" --output "$BENCH_DIR/pack-4m-p$part" \
      --partition "$part/2" --workers "$BENCH_THREADS" --overwrite --quiet $EXTRA_PACK_ARGS ||
      { mode_failed merge "pack --partition $part/2 failed (see logs/prep-pack-4m-p$part-$STAMP.log)"; return 0; }
  done
  local in_files=() bytes mb rows
  mapfile -t in_files < <(shard_files "$p0"; shard_files "$p1")
  bytes=$(shard_bytes "$p0") bytes=$((bytes + $(shard_bytes "$p1")))
  rows=$(($(pack_rows "$p0") + $(pack_rows "$p1")))
  mb=$(calc %.1f "$bytes / 1e6")

  alternate_cat_and_merge merge "$catout" "$out" "$p0" "$p1" -- "${in_files[@]}"
  local cat_wall=$CAT_WALL cat_rss_mib=$CAT_RSS cat_rc=$CAT_RC cat_cmd=$CAT_CMD
  local merge_wall=$MERGE_WALL merge_rss=$MERGE_RSS merge_rc=$MERGE_RC merge_cmd=$MERGE_CMD
  local repeat=$BENCH_REPEAT

  local sec="" fmt="%-8s %10s %9s %9s %9s %9s %9s\n" cat_mbs=n/a merge_mbs=n/a
  sec+="== merge (issue 4): 2 x 2M-row packs (pack --partition 0/2, 1/2 of $(corpus_dir 4m)), $mb MB of shards, page cache warm, best of $repeat"$'\n'
  sec+="inputs: $p0, $p1 (made with: $PACKER pack --input $corpus --output $p0 --partition 0/2 --workers $BENCH_THREADS --overwrite --quiet${EXTRA_PACK_ARGS:+ $EXTRA_PACK_ARGS}; same for 1/2)"$'\n'
  sec+="command: ${merge_cmd:-$PACKER merge --left $p0 --right $p1 --output $out --overwrite --quiet}   (validates its inputs first: included)"$'\n'
  sec+="baseline: $cat_cmd   (same filesystem, same run, target removed before each run)"$'\n'
  [[ $cat_rc == 0 ]] || { mode_failed merge "cat exited with status $cat_rc"; return 0; }
  cat_mbs=$(calc %.1f "$bytes / 1e6 / $cat_wall")
  if [[ $merge_rc == 0 ]]; then merge_mbs=$(calc %.1f "$bytes / 1e6 / $merge_wall"); fi
  sec+=$'\n'"$(printf "$fmt" what rows MB wall_s MB/s peak_MiB exit)"$'\n'
  # shellcheck disable=SC2059
  sec+="$(printf "$fmt" cat "$rows" "$mb" "$cat_wall" "$cat_mbs" "$cat_rss_mib" 0)"$'\n'
  # shellcheck disable=SC2059
  sec+="$(printf "$fmt" cat+sync "$rows" "$mb" "$CATSYNC_WALL" "$(calc %.1f "$bytes / 1e6 / $CATSYNC_WALL")" n/a 0)"$'\n'
  # shellcheck disable=SC2059
  sec+="$(printf "$fmt" merge "$rows" "$mb" "${merge_wall:-n/a}" "$merge_mbs" "$merge_rss" "$merge_rc")"$'\n'$'\n'
  if [[ $merge_rc != 0 ]]; then
    sec+="goal merge: exit status $merge_rc (logs/merge-*-$STAMP-1.log) -> FAIL"$'\n'
    status=1
  else
    local pct
    pct=$(calc %.1f "100 * $merge_mbs / $cat_mbs")
    sec+="goal merge >= 70% of cat MB/s: $merge_mbs vs $cat_mbs MB/s = $pct% -> $(verdict "$pct >= 70")"$'\n'
    [[ $merge_rss == n/a ]] || sec+="goal merge peak RSS <= 64 MiB: $merge_rss MiB -> $(verdict "$merge_rss <= 64")"$'\n'
  fi
  CMD_SECTIONS+=("$sec")
}

# ------------------------------------------------------------------ shuffle (issue 5)
bench_shuffle() {
  need_cmd shuffle shuffle || return 0
  local out="$BENCH_DIR/shuffle-4m" bytes mb rows buckets
  bytes=$(shard_bytes "$PACK4M") rows=$(pack_rows "$PACK4M")
  mb=$(calc %.1f "$bytes / 1e6")
  prep_shuffle() { rm -rf "$out"; sync; warm_pack "$PACK4M"; }
  measure shuffle prep_shuffle -- "$PACKER" shuffle --input "$PACK4M" --output "$out" --memory 64MiB --overwrite --quiet
  local sec="" fmt="%-8s %10s %9s %9s %9s %9s %8s %5s\n" mbs=n/a
  buckets=$(grep -o '[0-9]* buckets' "$M_LOG" 2>/dev/null | grep -o '[0-9]*' || echo '?')
  sec+="== shuffle (issue 5): $rows rows, $mb MB of pack data, --memory 64MiB, temp in the output folder, page cache warm"$'\n'
  sec+="command: $M_CMD"$'\n'
  if [[ $M_RC == 0 ]]; then mbs=$(calc %.1f "$bytes / 1e6 / $M_WALL"); fi
  sec+=$'\n'"$(printf "$fmt" what rows pack_MB wall_s MB/s peak_MiB buckets exit)"$'\n'
  # shellcheck disable=SC2059
  sec+="$(printf "$fmt" shuffle "$rows" "$mb" "${M_WALL:-n/a}" "$mbs" "$M_RSS" "$buckets" "$M_RC")"$'\n'$'\n'
  if [[ $M_RC != 0 ]]; then
    sec+="goal shuffle: exit status $M_RC ($M_LOG) -> FAIL"$'\n'
    status=1
  else
    sec+="goal shuffle >= 300 MB/s of pack data: $mbs MB/s -> $(verdict "$mbs >= 300")"$'\n'
    [[ $M_RSS == n/a ]] || sec+="goal shuffle peak RSS <= 64 MiB + 32 MiB: $M_RSS MiB -> $(verdict "$M_RSS <= 96")"$'\n'
  fi
  CMD_SECTIONS+=("$sec")
}

# ------------------------------------------------------------------ stats (issue 6)
bench_stats() {
  need_cmd stats stats || return 0
  local rows mb
  rows=$(pack_rows "$PACK4M") mb=$(calc %.1f "$(shard_bytes "$PACK4M") / 1e6")
  prep_stats() { warm_pack "$PACK4M"; }
  measure stats prep_stats -- "$PACKER" stats "$PACK4M"
  local sec="" fmt="%-8s %10s %9s %9s %9s %5s\n"
  sec+="== stats (issue 6): $rows rows, $mb MB of shards, page cache warm, best of $BENCH_REPEAT"$'\n'
  sec+="command: $M_CMD"$'\n'
  sec+=$'\n'"$(printf "$fmt" what rows shard_MB wall_s peak_MiB exit)"$'\n'
  # shellcheck disable=SC2059
  sec+="$(printf "$fmt" stats "$rows" "$mb" "${M_WALL:-n/a}" "$M_RSS" "$M_RC")"$'\n'$'\n'
  if [[ $M_RC != 0 ]]; then
    sec+="goal stats: exit status $M_RC ($M_LOG) -> FAIL"$'\n'
    status=1
  else
    sec+="goal stats <= 1 s (4M rows): $M_WALL s -> $(verdict "$M_WALL <= 1")"$'\n'
  fi
  CMD_SECTIONS+=("$sec")
}

# ------------------------------------------------------------------ show (issue 6)
# A 100-shard copy of the 4M pack (export --format pack --shard-rows 40000: the fastest way, ~0.25 s,
# vs ~1.1 s to pack the corpus again), then `show --run <middle run>` BENCH_SHOW_RUNS times back to
# back, without /usr/bin/time (its fork/exec is a few % of a few ms); one more run under
# /usr/bin/time -v gives the peak RSS. Also, for information, a page from the middle of that run.
bench_show() {
  need_cmd show show || return 0
  local out="$BENCH_DIR/pack-4m-100" shards runs mid from
  "$PACKER" export --help 2>&1 | grep -q -- '--shard-rows' ||
    { mode_failed show "export --format pack --shard-rows is needed to build the 100-shard pack"; return 0; }
  prepare pack-4m-100 "$PACKER" export "$PACK4M" --format pack --output "$out" --shard-rows 40000 --overwrite --quiet ||
    { mode_failed show "building the 100-shard pack failed (logs/prep-pack-4m-100-$STAMP.log)"; return 0; }
  shards=$(shard_files "$out" | wc -l)
  runs=$(sqlite3 "file:$out/metadata.db?mode=ro" 'SELECT count(*) FROM runs' 2>/dev/null || echo 200)
  mid=$((runs / 2))
  from=$(sqlite3 "file:$out/metadata.db?mode=ro" "SELECT steps / 2 FROM runs WHERE id = $mid" 2>/dev/null || echo 10000)
  warm_pack "$out"
  cat "$out/metadata.db" >/dev/null

  local sec="" fmt="%-28s %4s %6s %9s %9s %9s %9s %5s\n" variant
  sec+="== show (issue 6): $out, $shards shards of 40000 rows (made with: $PACKER export $PACK4M --format pack --output $out --shard-rows 40000 --overwrite --quiet), page cache warm, $BENCH_SHOW_RUNS runs back to back"$'\n'
  local goal_line=""
  local -a lines=()
  for variant in main from; do
    local cmd=("$PACKER" show "$out" --run "$mid") label="show --run $mid"
    if [[ $variant == from ]]; then cmd+=(--from "$from"); label+=" --from $from"; fi
    if [[ $variant == from ]]; then
      sec+="command: ${cmd[*]}   (information: a page from the middle of the run)"$'\n'
    else
      sec+="command: ${cmd[*]}"$'\n'
    fi
    wait_idle "show-$variant"
    local times=() i start end rc=0 slog="$BENCH_DIR/logs/show-$variant-$STAMP.log"
    log "show-$variant: ${cmd[*]} x $BENCH_SHOW_RUNS"
    for ((i = 1; i <= BENCH_SHOW_RUNS; i++)); do
      start=$EPOCHREALTIME
      "${cmd[@]}" >"$slog" 2>&1 || rc=$?
      end=$EPOCHREALTIME
      [[ $rc == 0 ]] || break
      times+=("$(calc %.2f "($end - $start) * 1000")")
    done
    if [[ $rc != 0 ]]; then
      log "ERROR: show exited with status $rc; last lines of $slog:"
      tail -n 20 "$slog" >&2
      lines+=("$(printf "$fmt" "$label" 0 "$shards" n/a n/a n/a n/a "$rc")")
      [[ $variant == main ]] && goal_line="goal show: exit status $rc ($slog) -> FAIL"
      status=1
      continue
    fi
    local sorted best median worst rss=n/a
    sorted=$(printf '%s\n' "${times[@]}" | sort -g)
    best=$(head -n1 <<<"$sorted") worst=$(tail -n1 <<<"$sorted")
    median=$(awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }' <<<"$sorted")
    log "show-$variant: ms ${times[*]}"
    if [[ $have_time == 1 ]]; then
      /usr/bin/time -v -o "$BENCH_DIR/logs/show-$variant-$STAMP.time" "${cmd[@]}" >/dev/null 2>&1 || true
      rss=$(sed -nE 's/.*Maximum resident set size \(kbytes\): ([0-9]+).*/\1/p' "$BENCH_DIR/logs/show-$variant-$STAMP.time")
      rss=$(calc %.1f "${rss:-0} / 1024")
    fi
    lines+=("$(printf "$fmt" "$label" "${#times[@]}" "$shards" "$best" "$median" "$worst" "$rss" 0)")
    if [[ $variant == main ]]; then
      goal_line="goal show of a middle run of a $shards-shard pack <= 50 ms: median $median ms (best $best) -> $(verdict "$median <= 50")"
      [[ $shards == 100 ]] || goal_line+="  (NOTE: $shards shards, not 100)"
    fi
  done
  sec+=$'\n'"$(printf "$fmt" command n shards best_ms median_ms max_ms peak_MiB exit)"$'\n'
  local l
  for l in "${lines[@]}"; do sec+="$l"$'\n'; done
  sec+=$'\n'"$goal_line"$'\n'
  CMD_SECTIONS+=("$sec")
}

# ------------------------------------------------------------------ export (issue 6)
bench_export() {
  need_cmd export export || return 0
  local out="$BENCH_DIR/export-4m.parquet" rows mb
  rows=$(pack_rows "$PACK4M") mb=$(calc %.1f "$(shard_bytes "$PACK4M") / 1e6")
  prep_export() { rm -f "$out"; sync; warm_pack "$PACK4M"; }
  measure export prep_export -- "$PACKER" export "$PACK4M" --format parquet --output "$out" --overwrite --quiet
  local sec="" fmt="%-16s %10s %9s %9s %12s %11s %9s %5s\n" rps=n/a pq_mb=n/a
  sec+="== export (issue 6): $rows rows, $mb MB of shards, page cache warm, best of $BENCH_REPEAT"$'\n'
  sec+="command: $M_CMD"$'\n'
  if [[ $M_RC == 0 ]]; then
    rps=$(calc %.0f "$rows / $M_WALL")
    [[ -f "$out" ]] && pq_mb=$(calc %.1f "$(stat -c %s "$out") / 1e6")
  fi
  sec+=$'\n'"$(printf "$fmt" what rows shard_MB wall_s rows/s parquet_MB peak_MiB exit)"$'\n'
  # shellcheck disable=SC2059
  sec+="$(printf "$fmt" "export parquet" "$rows" "$mb" "${M_WALL:-n/a}" "$rps" "$pq_mb" "$M_RSS" "$M_RC")"$'\n'$'\n'
  if [[ $M_RC != 0 ]]; then
    sec+="goal export: exit status $M_RC ($M_LOG) -> FAIL"$'\n'
    status=1
  else
    sec+="goal export to Parquet >= 1M rows/s: $rps rows/s -> $(verdict "$rps >= 1000000")"$'\n'
  fi
  CMD_SECTIONS+=("$sec")
}

# ------------------------------------------------------------------ pack --update (issue 10)
# A drop of symlinks: d6_bench, d7_bench -> the 4M corpus's games (200 runs), packed with
# --shard-rows 250000; then d6_bench_new, d7_bench_new -> 10 more games (5%, bench_corpus
# --seed 10), and three measurements in
# the same run: a full pack of the union (the reference), `pack --update` of a copy of the base
# pack, and a second `--update` with nothing new. The same update of a base twice as large
# (corpus-8m's 400 runs) must take no longer.
UPDATE_SHARD_ROWS=250000
# link_runs CORPUS DROP SUFFIX: a symlink DROP/<folder>SUFFIX to each depth folder of CORPUS.
link_runs() {
  local sub
  for sub in "$(realpath "$1")"/d*_bench; do ln -s "$sub" "$2/$(basename "$sub")$3"; done
}
bench_update() {
  need_cmd update pack || return 0
  local new="$BENCH_DIR/update-new-10" c8
  c8=$(corpus_dir 8m)
  prepare update-new "$CORPUS_GEN" --out "$new" --runs 10 --rows-per-run "$ROWS_PER_RUN" --seed 10 \
    --threads "$BENCH_GEN_THREADS" --layout "$BENCH_LAYOUT" "${MAIN_ROWS[@]}" ||
    { mode_failed update "generating the 10 new runs failed"; return 0; }
  prepare corpus-8m "$CORPUS_GEN" --out "$c8" --runs 400 --rows-per-run "$ROWS_PER_RUN" \
    --threads "$BENCH_GEN_THREADS" --layout "$BENCH_LAYOUT" "${MAIN_ROWS[@]}" ||
    { mode_failed update "generating corpus-8m failed"; return 0; }
  local sec="" fmt="%-28s %10s %9s %9s %10s %5s\n" size
  sec+="== pack --update (issue 10): base packed with --shard-rows $UPDATE_SHARD_ROWS, update adds a folder of 10 runs (5% of 4M), page cache warm"$'\n'
  sec+=$'\n'"$(printf "$fmt" what rows wall_s peak_MiB vs_full exit)"$'\n'
  local full4="" upd4="" again4="" upd8="" rss_full="" rss_upd=""
  for size in 4m 8m; do
    local drop="$BENCH_DIR/update-drop-$size" base="$BENCH_DIR/update-base-$size"
    local out="$BENCH_DIR/update-pack-$size" full="$BENCH_DIR/update-full-$size" corpus
    corpus=$(corpus_dir "$size")
    rm -rf "$drop" && mkdir -p "$drop"
    link_runs "$corpus" "$drop" ""
    warm "$corpus"
    prepare "update-base-$size" "$PACKER" pack --input "$drop" --output "$base" --shard-rows "$UPDATE_SHARD_ROWS" \
      --workers "$BENCH_THREADS" --overwrite --quiet ||
      { mode_failed update "packing the base failed"; return 0; }
    link_runs "$new" "$drop" _new
    warm "$drop"
    if [[ $size == 4m ]]; then
      prep_full() { rm -rf "$full"; warm "$drop"; }
      measure "update-full-$size" prep_full -- "$PACKER" pack --input "$drop" --output "$full" \
        --shard-rows "$UPDATE_SHARD_ROWS" --workers "$BENCH_THREADS" --quiet
      full4=$M_WALL rss_full=$M_RSS
      # shellcheck disable=SC2059
      sec+="$(printf "$fmt" "full pack of the union (4M)" "$(pack_rows "$full")" "${M_WALL:-n/a}" "$M_RSS" "100%" "$M_RC")"$'\n'
      sec+="  command: $M_CMD"$'\n'
    fi
    prep_update() { rm -rf "$out"; cp -a "$base" "$out"; sync; warm "$drop"; warm_pack "$out"; }
    measure "update-$size" prep_update -- "$PACKER" pack --input "$drop" --output "$out" --update \
      --workers "$BENCH_THREADS" --quiet
    local rc=$M_RC
    if [[ $size == 4m ]]; then upd4=$M_WALL rss_upd=$M_RSS; else upd8=$M_WALL; fi
    # shellcheck disable=SC2059
    sec+="$(printf "$fmt" "update, base of $size rows" "$(pack_rows "$out")" "${M_WALL:-n/a}" "$M_RSS" \
      "$(calc %.1f "100 * ${M_WALL:-0} / ${full4:-1}")%" "$rc")"$'\n'
    sec+="  command: $M_CMD"$'\n'
    if [[ $size == 4m ]]; then
      if [[ $rc == 0 ]] && ! cmp -s <(shard_files "$out" | xargs cat) <(shard_files "$full" | xargs cat); then
        sec+="  WARNING: the updated pack's shards differ from the full pack's"$'\n'
        status=1
      fi
      prep_again() { warm "$drop"; }
      measure "update-again-$size" prep_again -- "$PACKER" pack --input "$drop" --output "$out" --update \
        --workers "$BENCH_THREADS" --quiet
      again4=$M_WALL
      # shellcheck disable=SC2059
      sec+="$(printf "$fmt" "second update, nothing new" "$(pack_rows "$out")" "${M_WALL:-n/a}" "$M_RSS" \
        "$(calc %.1f "100 * ${M_WALL:-0} / ${full4:-1}")%" "$M_RC")"$'\n'
    fi
  done
  sec+=$'\n'
  if [[ -z "$full4" || -z "$upd4" || -z "$again4" || -z "$upd8" ]]; then
    sec+="goal pack --update: a measurement failed (see $BENCH_DIR/logs) -> FAIL"$'\n'
    status=1
  else
    sec+="goal update <= 15% of a full pack of the union: $(calc %.1f "100 * $upd4 / $full4")% -> $(verdict "$upd4 <= 0.15 * $full4")"$'\n'
    sec+="goal update of a base twice as large takes no longer: $upd8 s vs $upd4 s -> $(verdict "$upd8 <= 1.15 * $upd4") (15% allowed for noise)"$'\n'
    sec+="goal second update (nothing new) <= 2% of a full pack: $(calc %.1f "100 * $again4 / $full4")% -> $(verdict "$again4 <= 0.02 * $full4")"$'\n'
    [[ $rss_upd == n/a ]] || sec+="peak RSS: update $rss_upd MiB, full pack $rss_full MiB"$'\n'
  fi
  CMD_SECTIONS+=("$sec")
}

# ------------------------------------------------------------------ companions (issue 12)
# The two 2M-row partition packs of the merge benchmark, each with an `embeddings` companion of
# shape [rows, 64] float32 (256 bytes a row, 5x the steps bytes; random values, attached with
# `attach` so their checksums are recorded and merge verifies them): merge against a cat of
# all their shard and companion files, then a shuffle of the merged pack.
COMPANION_DIM=64
bench_companions() {
  need_cmd companions attach || return 0
  local corpus part c0="$BENCH_DIR/comp-4m-p0" c1="$BENCH_DIR/comp-4m-p1" out="$BENCH_DIR/comp-merge-4m"
  local catout="$BENCH_DIR/comp-merge-4m-cat.npy" shuffled="$BENCH_DIR/comp-shuffle-4m"
  corpus=$(corpus_dir 4m)
  warm "$corpus"
  for part in 0 1; do
    local c="$BENCH_DIR/comp-4m-p$part" array="$BENCH_DIR/comp-embeddings-p$part.npy"
    if [[ ! -f "$c/metadata.db" || "$PACKER" -nt "$c/metadata.db" ]]; then
      rm -rf "$c"
      # shellcheck disable=SC2086 # EXTRA_PACK_ARGS is meant to be word-split
      prepare "comp-p$part" "$PACKER" pack --input "$corpus" --output "$c" --partition "$part/2" \
        --workers "$BENCH_THREADS" --quiet $EXTRA_PACK_ARGS ||
        { mode_failed companions "pack --partition $part/2 failed"; return 0; }
      prepare "comp-array-p$part" python3 bench/make_array.py "$array" "$(pack_rows "$c")" "$COMPANION_DIM" ||
        { mode_failed companions "writing the embeddings failed"; return 0; }
      prepare "comp-attach-p$part" "$PACKER" attach "$c" --name embeddings --from "$array" --quiet ||
        { mode_failed companions "attach failed"; return 0; }
      rm -f "$array"
    fi
  done
  local in_files=() bytes mb rows
  mapfile -t in_files < <(find "$c0" "$c1" -maxdepth 1 -name '*.npy' -type f | sort)
  bytes=0
  local f
  for f in "${in_files[@]}"; do bytes=$((bytes + $(stat -c %s "$f"))); done
  rows=$(($(pack_rows "$c0") + $(pack_rows "$c1")))
  mb=$(calc %.1f "$bytes / 1e6")
  alternate_cat_and_merge comp-merge "$catout" "$out" "$c0" "$c1" -- "${in_files[@]}"
  local sec="" fmt="%-8s %10s %9s %9s %9s %9s %5s\n" cat_mbs merge_mbs=n/a
  sec+="== companions (issue 12): 2 x 2M-row packs, each with embeddings [rows, $COMPANION_DIM] float32; $mb MB of shards + companions, page cache warm, best of $BENCH_REPEAT"$'\n'
  sec+="command: $MERGE_CMD"$'\n'
  sec+="baseline: $CAT_CMD"$'\n'
  [[ $CAT_RC == 0 ]] || { mode_failed companions "cat exited with status $CAT_RC"; return 0; }
  cat_mbs=$(calc %.1f "$bytes / 1e6 / $CAT_WALL")
  if [[ $MERGE_RC == 0 ]]; then merge_mbs=$(calc %.1f "$bytes / 1e6 / $MERGE_WALL"); fi
  sec+=$'\n'"$(printf "$fmt" what rows MB wall_s MB/s peak_MiB exit)"$'\n'
  # shellcheck disable=SC2059
  sec+="$(printf "$fmt" cat "$rows" "$mb" "$CAT_WALL" "$cat_mbs" "$CAT_RSS" 0)"$'\n'
  # shellcheck disable=SC2059
  sec+="$(printf "$fmt" cat+sync "$rows" "$mb" "$CATSYNC_WALL" "$(calc %.1f "$bytes / 1e6 / $CATSYNC_WALL")" n/a 0)"$'\n'
  # shellcheck disable=SC2059
  sec+="$(printf "$fmt" merge "$rows" "$mb" "${MERGE_WALL:-n/a}" "$merge_mbs" "$MERGE_RSS" "$MERGE_RC")"$'\n'

  local memory=256MiB shuffle_mbs=n/a
  prep_comp_shuffle() { rm -rf "$shuffled"; sync; warm_pack "$out"; find "$out" -name 'embeddings*' -exec cat {} + >/dev/null; }
  if [[ $MERGE_RC == 0 ]]; then
    measure comp-shuffle prep_comp_shuffle -- "$PACKER" shuffle --input "$out" --output "$shuffled" --memory "$memory" --overwrite --quiet
    [[ $M_RC != 0 ]] || shuffle_mbs=$(calc %.1f "$bytes / 1e6 / $M_WALL")
    # shellcheck disable=SC2059
    sec+="$(printf "$fmt" shuffle "$rows" "$mb" "${M_WALL:-n/a}" "$shuffle_mbs" "$M_RSS" "$M_RC")"$'\n'
    sec+="  shuffle command: $M_CMD"$'\n'
  fi
  sec+=$'\n'
  if [[ $MERGE_RC != 0 ]]; then
    sec+="goal merge with companions: exit status $MERGE_RC -> FAIL"$'\n'
    status=1
  else
    local pct
    pct=$(calc %.1f "100 * $merge_mbs / $cat_mbs")
    sec+="goal merge >= 70% of cat (shards + companions): $merge_mbs vs $cat_mbs MB/s = $pct% -> $(verdict "$pct >= 70")"$'\n'
  fi
  if [[ $shuffle_mbs == n/a ]]; then
    sec+="goal shuffle with companions: not measured or failed -> FAIL"$'\n'
    status=1
  else
    sec+="goal shuffle >= 250 MB/s of total bytes: $shuffle_mbs MB/s -> $(verdict "$shuffle_mbs >= 250")"$'\n'
    [[ $M_RSS == n/a ]] || sec+="goal shuffle peak RSS <= --memory ($memory) + 32 MiB: $M_RSS MiB -> $(verdict "$M_RSS <= 288")"$'\n'
  fi
  CMD_SECTIONS+=("$sec")
}

# ------------------------------------------------------------------ report (issue 24)
# report of the 4M-row pack, then (BENCH_REPORT_40M=1, the default) of a 40M-row pack: ten copies
# of it merged (merge of ten hard-linked copies of pack-4m; built once, ~2 GB, rebuilt when older
# than pack-4m).
# Same rows ten times over, so the same figures at ten times the rows: wall should scale with
# rows, peak RSS should not.
bench_report() {
  need_cmd report report || return 0
  local pack40="$BENCH_DIR/pack-40m" out="$BENCH_DIR/report.html" sec="" p i rows mb
  local fmt="%-12s %10s %9s %9s %9s %9s %5s\n" walls=() rsss=()
  local packs=("$PACK4M")
  if [[ ${BENCH_REPORT_40M:-1} == 1 ]]; then
    if [[ ! -f $pack40/metadata.db || $PACK4M/metadata.db -nt $pack40/metadata.db ]] ||
      [[ $(pack_rows "$pack40") != $((10 * PACK4M_ROWS)) ]]; then
      # merge refuses one path given twice: ten hard-linked copies (no extra disk), removed after.
      local inputs=() copies="$BENCH_DIR/pack-4m-copies"
      rm -rf "$copies"
      for ((i = 0; i < 10; i++)); do
        mkdir -p "$copies/$i" && cp -al "$PACK4M/." "$copies/$i/"
        inputs+=(--input "$copies/$i")
      done
      if prepare pack-40m "$PACKER" merge "${inputs[@]}" --output "$pack40" --overwrite --quiet; then
        packs+=("$pack40")
      else
        sec+="pack-40m: could not be built (see logs/prep-pack-40m-$STAMP.log): 40M NOT MEASURED"$'\n'
      fi
      rm -rf "$copies"
    else
      packs+=("$pack40")
    fi
  fi
  sec="== report (issue 24): page cache warm, best of $BENCH_REPEAT"$'\n'"$sec"
  local table=""
  table+="$(printf "$fmt" what rows shard_MB wall_s Mrows/s peak_MiB exit)"$'\n'
  for p in "${packs[@]}"; do
    rows=$(pack_rows "$p") mb=$(calc %.1f "$(shard_bytes "$p") / 1e6")
    REPORT_PACK=$p
    prep_report() { warm_pack "$REPORT_PACK"; rm -f "$out"; }
    measure "report-$(basename "$p")" prep_report -- "$PACKER" report "$p" --output "$out" --overwrite --quiet
    sec+="command: $M_CMD"$'\n'
    local mrs=n/a
    [[ $M_RC != 0 ]] || mrs=$(calc %.1f "$rows / 1e6 / $M_WALL")
    # shellcheck disable=SC2059
    table+="$(printf "$fmt" "$(basename "$p")" "$rows" "$mb" "${M_WALL:-n/a}" "$mrs" "$M_RSS" "$M_RC")"$'\n'
    if [[ $M_RC != 0 ]]; then
      table+="goal report: exit status $M_RC ($M_LOG) -> FAIL"$'\n'
      status=1
    fi
    walls+=("${M_WALL:-0}") rsss+=("$M_RSS")
  done
  sec+=$'\n'"$table"$'\n'
  sec+="goal report <= 1 s (4M rows): ${walls[0]} s -> $(verdict "${walls[0]} <= 1")"$'\n'
  if [[ ${#walls[@]} == 2 ]]; then
    sec+="goal report <= 10 s (40M rows; a billion rows ~ 25x that): ${walls[1]} s -> $(verdict "${walls[1]} <= 10")"$'\n'
    if [[ ${rsss[0]} != n/a && ${rsss[1]} != n/a ]]; then
      sec+="goal report peak RSS flat in rows (40M <= 4M + 32 MiB): ${rsss[1]} vs ${rsss[0]} MiB -> $(verdict "${rsss[1]} <= ${rsss[0]} + 32")"$'\n'
    fi
  fi
  rm -f "$out"
  CMD_SECTIONS+=("$sec")
}
