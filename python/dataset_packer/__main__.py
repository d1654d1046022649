"""`python -m dataset_packer PACK [PACK …] [--json]`: what a pack holds, from its headers and
metadata.db alone (no pass over the rows): rows, runs, shards, valuation types, runs by depth,
scores, companions, whether it is shuffled or legacy, and its `pack_id@version`. The
numbers `dataset-packer stats` prints about rows need the `dataset-packer` command."""

from __future__ import annotations

import argparse
import json
import sys

from ._data import of
from ._errors import PackError
from ._pack import Pack
from ._select import has_table


def summary(pack: Pack) -> dict:
    db = pack.db()
    runs = db.execute("SELECT COUNT(*), MIN(max_score), AVG(max_score), MAX(max_score), "
                      "MAX(highest_tile) FROM runs").fetchone()
    depths = []
    columns = {row[1] for row in db.execute("PRAGMA table_info(run_details)")}
    if "depth" in columns:
        depths = [{"depth": d, "runs": n, "rows": r} for d, n, r in db.execute(
            "SELECT depth, COUNT(*), SUM(runs.steps) FROM runs JOIN run_details "
            "ON run_details.run_id = runs.id GROUP BY depth ORDER BY depth")]
    skipped = [{"source_path": p, "reason": r} for p, r in db.execute(
        "SELECT source_path, reason FROM skipped_runs ORDER BY source_path")] if has_table(
        db, "skipped_runs") else []
    return {
        "pack": str(pack.path), "pack_id": pack.pack_id, "version": pack.version,
        "versions": of(pack).history.latest, "rows": len(pack), "runs": pack.num_runs,
        "skipped_runs": skipped,
        "shards": len(pack.shards), "shuffled": pack.shuffled, "legacy": pack.legacy,
        "valuation_names": list(pack.valuation_names),
        "max_score": {"min": runs[1], "mean": runs[2], "max": runs[3]},
        "highest_tile": runs[4], "depths": depths, "companions": pack.companions,
    }


def render(s: dict) -> str:
    lines = [
        f"pack        {s['pack']}",
        f"version     {s['pack_id'] or 'unversioned'}@{s['version']}"
        + (f" ({s['versions']} versions)" if s["versions"] > 1 else ""),
        f"rows        {s['rows']:,} in {s['shards']} shard{'s' if s['shards'] != 1 else ''}"
        + (" (shuffled)" if s["shuffled"] else "") + (" (legacy 46-byte rows)" if s["legacy"]
                                                      else ""),
        f"runs        {s['runs']:,}",
        f"valuations  {', '.join(s['valuation_names'])}",
    ]
    score = s["max_score"]
    if s["runs"]:
        lines.append(f"max_score   min {score['min']:,}, mean {score['mean']:,.0f}, "
                     f"max {score['max']:,}; highest tile {s['highest_tile']:,}")
    for d in s["depths"]:
        depth = "?" if d["depth"] is None else d["depth"]
        lines.append(f"depth {depth!s:<5} {d['runs']:,} runs, {d['rows']:,} rows")
    if any(d["depth"] is None for d in s["depths"]):
        lines.append("            ? = no depth recorded (a pack converted from the reference "
                     "packer's has none; docs/migration.md, \"depth\")")
    if s["legacy"]:
        lines.append("legacy      read with ev_legal recomputed from the board; convert it: "
                     f"dataset-packer export {s['pack']} --format pack --output NEW")
    if s["skipped_runs"]:
        lines.append(f"skipped     {len(s['skipped_runs']):,} run"
                     f"{'s' if len(s['skipped_runs']) != 1 else ''} left out at pack time "
                     "(--skip-invalid; metadata.db table skipped_runs):")
        lines.extend(f"              {r['source_path']}: {r['reason']}"
                     for r in s["skipped_runs"][:3])
    if s["companions"]:
        lines.append(f"companions  {', '.join(s['companions'])}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m dataset_packer",
        description="Summarise dataset-packer packs from their headers and metadata.db.",
        epilog="example: python -m dataset_packer packs/d6 packs/d7 --json")
    parser.add_argument("packs", nargs="+", metavar="PACK", help="a pack folder")
    parser.add_argument("--json", action="store_true", help="one JSON document per pack")
    args = parser.parse_args(argv)
    status = 0
    for i, path in enumerate(args.packs):
        try:
            with Pack(path) as pack:
                s = summary(pack)
        except PackError as e:
            print(f"error: {e}", file=sys.stderr)
            status = 1
            continue
        if args.json:
            print(json.dumps(s))
        else:
            print(("\n" if i else "") + render(s))
    return status


if __name__ == "__main__":
    sys.exit(main())
