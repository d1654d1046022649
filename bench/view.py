#!/usr/bin/env python3
"""`dataset-packer view` against the speed goals of issue 46: on a 100M-row pack, the runs table
in under 1 s, a run page in under 200 ms, and the server's RSS flat in the pack's size.

For each pack given, the script starts `dataset-packer view PACK --port 0` and times, over
HTTP as the page asks:

* `start`: from the process's start to the line with its address (the pack opened, the port
  bound);
* `runs table`: GET /api/runs of the first page (50 runs), ordered by id, by -max_score, and
  filtered with `depth = 7 AND max_score > 1000` ordered by -max_score: what the page asks
  for when it opens and when a column is clicked or a filter typed;
* `run page`: what opening /run/<id>?step=<k> costs the page: the HTML, /api/pack,
  /api/runs/<id>/timeline and the 200-step chunk around step k, one after another, for a run in
  the middle of the pack;
* the server's peak RSS (VmHWM) after all of it, and its RSS then split into anonymous memory
  (what it allocated) and file pages (the pack's pages it touched through its maps).

Each figure is the best of `--repeat` rounds; with `--cold` (root only) the page cache is
dropped before the first round, whose figures are reported as `cold`.

Packs come from `examples/synthetic_pack.rs`:

    cargo build --release --example synthetic_pack
    target/release/examples/synthetic_pack /tmp/vb/p100m 100000000 20000
    target/release/examples/synthetic_pack /tmp/vb/p10m 10000000 20000
    target/release/examples/synthetic_pack /tmp/vb/pruns 10000000 10     # 1M runs
    python3 bench/view.py /tmp/vb/p10m /tmp/vb/p100m /tmp/vb/pruns --cold
"""

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def fetch(base: str, path: str) -> bytes:
    with urllib.request.urlopen(base + path, timeout=120) as r:
        return r.read()


def timed(base: str, paths: list[str]) -> float:
    start = time.perf_counter()
    for p in paths:
        fetch(base, p)
    return time.perf_counter() - start


def drop_caches() -> bool:
    try:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def memory_mib(pid: int) -> dict:
    """Peak RSS (VmHWM), and the RSS now split into anonymous memory (what the server
    allocated) and file pages (the pack's mapped pages it touched: page cache, shared, freed by
    the kernel under pressure)."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key = line.split(":")[0]
        if key in ("VmHWM", "RssAnon", "RssFile"):
            out[key] = int(line.split()[1]) / 1024
    return out


def measure(binary: str, pack: str, repeat: int, cold: bool) -> dict:
    if cold:
        drop_caches()
    started = time.perf_counter()
    server = subprocess.Popen([binary, "view", pack, "--port", "0"], stdout=subprocess.PIPE, text=True)
    try:
        banner = server.stdout.readline().strip()
        address = server.stdout.readline().split("http://")[1].split("/")[0]
        start = time.perf_counter() - started
        base = f"http://{address}"
        facts = json.loads(fetch(base, "/api/pack"))
        where = urllib.parse.quote("depth = 7 AND max_score > 1000")
        tables = {
            "by id": ["/api/runs?limit=50"],
            "by -max_score": ["/api/runs?limit=50&order=-max_score"],
            "filtered, by -max_score": [f"/api/runs?limit=50&order=-max_score&where={where}"],
        }
        ids = [r["id"] for r in json.loads(fetch(base, "/api/runs?limit=1&offset=%d" % (facts["runs"] // 2)))["runs"]]
        run = ids[0]
        timeline = json.loads(fetch(base, f"/api/runs/{run}/timeline"))
        steps = timeline["step_index"]
        k = steps[len(steps) // 2]
        chunk = steps[(len(steps) // 2) // 200 * 200]
        page = [f"/run/{run}?step={k}", "/api/pack", f"/api/runs/{run}/timeline",
                f"/api/runs/{run}?from={chunk}&limit=200"]
        out = {"pack": pack, "banner": banner, "rows": facts["rows"], "runs": facts["runs"],
               "start_s": start, "run": run, "run_steps": len(steps)}
        for name, paths in tables.items():
            if cold:
                drop_caches()
                out[f"runs table {name} cold_s"] = timed(base, paths)
            out[f"runs table {name} s"] = min(timed(base, paths) for _ in range(repeat))
        if cold:
            drop_caches()
            out["run page cold_s"] = timed(base, page)
        out["run page s"] = min(timed(base, page) for _ in range(repeat))
        out.update({f"{k}_mib": v for k, v in memory_mib(server.pid).items()})
        return out
    finally:
        server.kill()
        server.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("packs", nargs="+")
    ap.add_argument("--binary", default=str(REPO / "target/release/dataset-packer"))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--cold", action="store_true", help="drop the page cache first (root)")
    a = ap.parse_args()
    if a.cold and os.geteuid() != 0:
        sys.exit("--cold drops the page cache, which needs root")
    for pack in a.packs:
        r = measure(a.binary, pack, a.repeat, a.cold)
        print(json.dumps(r, indent=1))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
