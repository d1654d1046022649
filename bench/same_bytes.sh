#!/usr/bin/env bash
# Packs the same drops with two binaries and compares what they wrote: `cmp` on every file of
# the packs, and a `sqlite3 .dump` of metadata.db with the values that name the time or the
# binary (created/updated timestamps, the command line) masked. Used for issue 34 (the copying
# and checksumming moved to the workers: the bytes must not change); any change of the writer
# can use it the same way.
#
#   bench/same_bytes.sh OLD_BINARY [NEW_BINARY]    # NEW defaults to target/release/dataset-packer
#
# Drops: the fixtures (current layout at depths 6 and 2/3, old layout, the findings drop), a
# fixture drop with an invalid run left out (--skip-invalid: the later runs' ids change), a
# drop with a duplicate run (kept, and left out with --dedupe), and three generated drops
# (bench_corpus: 12 runs of 3 000 rows, each row layout). Each with and without
# --search-stats, in one file and with --shard-rows 7001 (shards end inside runs), at 1 and 3
# workers; and `pack --update` of the generated drops (half the runs, then all of them).
# Exit status 1 on any difference. Needs sqlite3.
set -euo pipefail
cd "$(dirname "$0")/.."
OLD=$(realpath "$1")
NEW=$(realpath "${2:-target/release/dataset-packer}")
WORK=${SAME_BYTES_DIR:-target/bench/same-bytes}
rm -rf "$WORK"
mkdir -p "$WORK/drops"
WORK=$(realpath "$WORK")
cargo build --release --example bench_corpus >/dev/null 2>&1

# ---- drops
drops=(fixtures/raw fixtures/raw_d23 fixtures/raw_design fixtures/findings)
cp -r fixtures/raw "$WORK/drops/skip"
cp -r fixtures/invalid/board_short/. "$WORK/drops/skip/zz_invalid/"
cp -r fixtures/raw "$WORK/drops/dup"
first=$(find fixtures/raw -name '*.meta.json' | sort | head -1)
base=${first%.meta.json}
cp "$base.meta.json" "$WORK/drops/dup/zz_copy.meta.json"
cp "$base.jsonl.gz" "$WORK/drops/dup/zz_copy.jsonl.gz"
drops+=("$WORK/drops/skip" "$WORK/drops/dup")
for spec in "cur67:current:6-7" "cur23:current:2-3" "old:design:6"; do
  IFS=: read -r name rows depth <<<"$spec"
  target/release/examples/bench_corpus --out "$WORK/drops/$name" --runs 12 --rows-per-run 3000 \
    --threads 2 --rows "$rows" --depth "$depth" >/dev/null
  drops+=("$WORK/drops/$name")
done

# The first half of a drop's runs (by path), linked.
half_of() {
  local src=$1 dst=$2
  mkdir -p "$dst"
  local bases
  mapfile -t bases < <(cd "$src" && find . -name '*.meta.json' | sort | sed 's/\.meta\.json$//')
  local n=$((${#bases[@]} / 2))
  for b in "${bases[@]:0:$n}"; do
    mkdir -p "$dst/$(dirname "$b")"
    ln -s "$(realpath "$src/$b.meta.json")" "$dst/$b.meta.json"
    ln -s "$(realpath "$src/$b.jsonl.gz")" "$dst/$b.jsonl.gz"
  done
}

# metadata.db as SQL, the time, the binary's path and the pack's random id masked.
dump() {
  sqlite3 "$1" .dump | sed -E \
    -e 's/[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}Z/<time>/g' \
    -e "s/'pack_id','[0-9a-f]{32}'/'pack_id','<random>'/" \
    -e "s#$OLD|$NEW#<binary>#g"
}

cases=0 differ=0
# compare NAME: the packs in $WORK/old/pack and $WORK/new/pack (or both commands' failures).
compare() {
  local name=$1 a=$WORK/old/pack b=$WORK/new/pack bad=0
  cases=$((cases + 1))
  if [[ -e $a/metadata.db || -e $b/metadata.db ]]; then
    if [[ "$(cd "$a" && find . -type f | sort)" != "$(cd "$b" && find . -type f | sort)" ]]; then
      echo "DIFFER $name: different file lists"
      bad=1
    else
      while read -r f; do
        [[ $f == ./metadata.db ]] && continue
        cmp -s "$a/$f" "$b/$f" || {
          echo "DIFFER $name: $f"
          bad=1
        }
      done < <(cd "$a" && find . -type f | sort)
      diff <(dump "$a/metadata.db") <(dump "$b/metadata.db") >"$WORK/db.diff" || {
        echo "DIFFER $name: metadata.db"
        head -20 "$WORK/db.diff"
        bad=1
      }
    fi
  fi
  if [[ $bad == 1 ]]; then differ=$((differ + 1)); else echo "same $name ($(cd "$a" 2>/dev/null && find . -type f | wc -l) files)"; fi
}

# run_both NAME ARGS...: `pack ARGS` with each binary, into its own folder, then compare.
run_both() {
  local name=$1
  shift
  for which in old new; do
    local bin=$OLD
    [[ $which == new ]] && bin=$NEW
    rm -rf "$WORK/$which"
    mkdir -p "$WORK/$which"
    # A relative output path, so the recorded command lines only differ in the binary.
    set +e
    (cd "$WORK/$which" && "$bin" pack --output pack --quiet "$@" >out.json 2>err.txt)
    echo $? >"$WORK/$which/status"
    set -e
  done
  if ! cmp -s "$WORK/old/status" "$WORK/new/status"; then
    echo "DIFFER $name: exit status $(cat "$WORK/old/status") vs $(cat "$WORK/new/status")"
    differ=$((differ + 1))
    return
  fi
  compare "$name"
}

for d in "${drops[@]}"; do
  for stats in "" --search-stats; do
    for shards in "" "--shard-rows 7001"; do
      for w in 1 3; do
        extra=()
        [[ $d == */skip ]] && extra=(--skip-invalid)
        # shellcheck disable=SC2086
        run_both "$(basename "$d") $stats $shards --workers $w" --input "$(realpath "$d")" \
          --workers "$w" $stats $shards "${extra[@]}"
      done
    done
  done
done
run_both "dup --dedupe" --input "$WORK/drops/dup" --dedupe --workers 2

# pack --update: half the runs, then all of them, into the same pack.
for name in cur67 cur23 old; do
  rm -rf "$WORK/drops/$name-half"
  half_of "$WORK/drops/$name" "$WORK/drops/$name-half"
  for stats in "" --search-stats; do
    for shards in "" "--shard-rows 7001"; do
      for which in old new; do
        bin=$OLD
        [[ $which == new ]] && bin=$NEW
        rm -rf "$WORK/$which" && mkdir -p "$WORK/$which"
        # shellcheck disable=SC2086
        (cd "$WORK/$which" && "$bin" pack --input "$WORK/drops/$name-half" --output pack --quiet $stats $shards >/dev/null &&
          "$bin" pack --update --input "$WORK/drops/$name" --output pack --quiet --workers 2 $stats >/dev/null)
      done
      compare "update $name $stats $shards"
    done
  done
done

echo "$cases cases, $differ differ"
[[ $differ == 0 ]]
