#!/usr/bin/env python3
"""Pack scaling bench (issue 34): where pack's CPU time goes, thread by thread, and how close
pack comes to the decompression floor at the same thread count.

    python3 bench/scaling.py cpu     # per-thread CPU shares at 1, 2, 4 workers, ±--search-stats,
                                     # and Amdahl's prediction for 16 and 64 cores
    python3 bench/scaling.py ratio   # pack ÷ libdeflate floor at 2 workers, paired rounds
    python3 bench/scaling.py rss     # peak RSS at 2 workers on half the drop and on all of it
    python3 bench/scaling.py bound   # the ceiling a free parser would reach: the floor's CPU
                                     # time against the floor's plus writing the pack's bytes
    python3 bench/scaling.py lock    # two threads writing one file against two files: the
                                     # kernel's one-writer-per-file lock, measured
    python3 bench/scaling.py all     # cpu, ratio and rss
    python3 bench/scaling.py ab OLD_BINARY NEW_BINARY
                                     # two binaries' pack --workers 2 by CPU time, paired
                                     # alternating rounds with the floor, ±--search-stats

The three drops are generated once by examples/bench_corpus, 400 runs of 5 000 rows each by
default (2.75 MB of JSON a run, the shape of the issue's 8 M-row drop; SCAL_SHAPE=100x20000 for
the 11 MB runs of the first measurements): the current logger's rows with depth-6/7 and
depth-2/3 search counters, and the old (design notes') rows. CPU shares come from the binary
itself: with DATASET_PACKER_THREAD_CPU=FILE, `pack` writes each thread's CPU time
(CLOCK_THREAD_CPUTIME_ID: the parser threads `worker-N`, the main thread, the `writeback`
threads) and the pieces of work inside them (spans: the writer's per-run `commit`, made on
whichever worker completes the next run, is the serial part), at its end. CPU time barely
changes when other jobs share the machine, wall time does: every wall figure is printed with
the load average, rounds alternate floor and pack, and medians are reported.

Environment: SCAL_SHAPE (RUNSxROWS, default 400x5000), PACKER (the binary, default
target/release/dataset-packer), SCAL_DIR (default
target/bench/scaling), SCAL_ROUNDS (paired rounds, default 5), SCAL_CPU_ROUNDS (runs per CPU
configuration, default 3), SCAL_WORKERS (default "1 2 4"), SCAL_OUT (where packs are written,
default /dev/shm: tmpfs).
"""

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKER = os.environ.get("PACKER", os.path.join(ROOT, "target/release/dataset-packer"))
EXAMPLES = os.path.join(ROOT, "target/release/examples")
DIR = os.environ.get("SCAL_DIR", os.path.join(ROOT, "target/bench/scaling"))
ROUNDS = int(os.environ.get("SCAL_ROUNDS", "5"))
# RUNSxROWS: the drops' shape.
RUNS, RUN_ROWS = (int(x) for x in os.environ.get("SCAL_SHAPE", "400x5000").split("x"))
CPU_ROUNDS = int(os.environ.get("SCAL_CPU_ROUNDS", "3"))
WORKERS = [int(w) for w in os.environ.get("SCAL_WORKERS", "1 2 4").split()]
# Packs are written to tmpfs, as in the issue's measurement: the disk (and other jobs' I/O on
# it) plays no part, the floor writes nothing either.
OUT = os.environ.get("SCAL_OUT", "/dev/shm" if os.path.isdir("/dev/shm") else DIR)

# name: bench_corpus arguments
DROPS = {
    "current d6-7": ["--rows", "current", "--depth", "6-7"],
    "current d2-3": ["--rows", "current", "--depth", "2-3"],
    "old layout": ["--rows", "design", "--depth", "6"],
}


def drop_dir(name):
    shape = "" if (RUNS, RUN_ROWS) == (100, 20000) else f"-{RUNS}x{RUN_ROWS}"
    return os.path.join(DIR, "drop-" + name.replace(" ", "-") + shape)


def load():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def make_drops():
    if all(os.path.exists(os.path.join(EXAMPLES, e)) for e in ("bench_corpus", "gunzip_floor")):
        pass  # built before (cargo would only check, but waits for other builds' lock)
    else:
        subprocess.run(
            ["cargo", "build", "--release", "--example", "bench_corpus", "--example",
             "gunzip_floor"],
            cwd=ROOT,
            check=True,
        )
    for name, args in DROPS.items():
        d = drop_dir(name)
        if os.path.exists(os.path.join(d, ".complete")):
            continue  # generated before (bench_corpus writes .complete last)
        shutil.rmtree(d, ignore_errors=True)
        print(f"generating {d}", file=sys.stderr)
        subprocess.run(
            [os.path.join(EXAMPLES, "bench_corpus"), "--out", d, "--runs", str(RUNS),
             "--rows-per-run", str(RUN_ROWS), "--threads", "2", *args],
            check=True,
            stdout=subprocess.DEVNULL,
        )


def warm(d):
    for root, _, files in os.walk(d):
        for f in files:
            with open(os.path.join(root, f), "rb") as fh:
                while fh.read(1 << 20):
                    pass


def cpu_of_children(before):
    now = os.times()
    return (now.children_user - before.children_user) + (now.children_system - before.children_system)


def run_pack(drop, workers, search, probe=None, out_dir=None, packer=None):
    """One pack into a fresh folder: (wall s, CPU s, peak RSS KiB, probe report or None)."""
    out = out_dir or tempfile.mkdtemp(prefix="scal-pack-", dir=OUT)
    target = os.path.join(out, "pack")
    shutil.rmtree(target, ignore_errors=True)
    env = dict(os.environ)
    report = os.path.join(out, "threads.json")
    if probe:
        env["DATASET_PACKER_THREAD_CPU"] = report
    cmd = ["/usr/bin/time", "-f", "%M", packer or PACKER, "pack", "--input", drop, "--output", target,
           "--workers", str(workers), "--quiet"] + (["--search-stats"] if search else [])
    before = os.times()
    t = time.perf_counter()
    p = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t
    cpu = cpu_of_children(before)
    if p.returncode != 0:
        sys.exit(f"pack failed: {p.stderr}")
    rss = int(p.stderr.strip().splitlines()[-1])
    data = json.load(open(report)) if probe else None
    if not out_dir:
        shutil.rmtree(out, ignore_errors=True)
    return wall, cpu, rss, data


def floor_report(drop, threads):
    """One run of the libdeflate floor: (its JSON report, its CPU s)."""
    before = os.times()
    p = subprocess.run(
        [os.path.join(EXAMPLES, "gunzip_floor"), drop, "--threads", str(threads), "--engine",
         "libdeflate"],
        capture_output=True, text=True, check=True,
    )
    return json.loads(p.stdout), cpu_of_children(before)


def run_floor(drop, threads):
    """One run of the libdeflate floor: (wall s of its decompression, CPU s)."""
    report, cpu = floor_report(drop, threads)
    return report["seconds"], cpu


MAIN = "main thread (starts, discovers, publishes; before ordered_try_commit also the writer)"
COMMIT = "  workers: commit (the writer, per run: serial)"
# The writes into one file (`write into one file: steps`, `…: search`): serial per file.
FILE_SPAN = "  workers: write into one file: "


def shares(report):
    """Per-thread and per-piece CPU shares (percent of the process's CPU time)."""
    total = report["process_cpu_s"]
    cpu = report["cpu_s"]
    workers = sum(v for k, v in cpu.items() if k.startswith("thread worker-"))
    main = cpu.get("thread main", 0.0)
    writeback = sum(v for k, v in cpu.items() if "writeback" in k)
    spans = {k[5:]: v for k, v in cpu.items() if k.startswith("span ")}
    # The writer's work per run is serial wherever it runs: on the main thread (span `writer`,
    # binaries before ordered_try_commit) or on whichever worker completes the next run (span
    # `commit`, inside the workers' time).
    out = {
        "parsers (worker-N threads)": workers,
        MAIN: main,
        "  of which the writer (per run)": spans.get("writer", 0.0),
        COMMIT: spans.get("commit", 0.0),
        "writeback threads": writeback,
        "other / unaccounted": total - workers - main - writeback,
    }
    for k, v in spans.items():
        if k not in ("writer", "commit"):
            if k.startswith("main: "):
                out["  " + k] = v
            else:
                out[("  writer: " if k.startswith("writer") else "  workers: ") + k] = v
    return {k: 100.0 * v / total for k, v in out.items()}, total


def amdahl_efficiency(serial, n):
    """Speed-up ÷ n for a serial fraction `serial` of the 1-thread CPU time."""
    return 1.0 / (serial * n + (1.0 - serial))


def subset(d, runs, tag):
    """A drop of the first `runs` runs of `d` (by path), their files linked."""
    d = os.path.abspath(d)
    out = os.path.join(DIR, f"{tag}-" + os.path.basename(d))
    if not os.path.exists(out):
        bases = sorted(
            os.path.relpath(os.path.join(root, f), d)[: -len(".meta.json")]
            for root, _, files in os.walk(d)
            for f in files
            if f.endswith(".meta.json")
        )
        for base in bases[:runs]:
            os.makedirs(os.path.join(out, os.path.dirname(base)), exist_ok=True)
            for ext in (".meta.json", ".jsonl.gz"):
                os.symlink(os.path.join(d, base + ext), os.path.join(out, base + ext))
    return out


def fixed_main_cpu(d, workers, search):
    """The main thread's CPU time on a one-run pack of `d`: what it spends whatever the drop's
    size (starting, creating the staging folder and metadata.db, publishing)."""
    one = subset(d, 1, "one")
    return statistics.median(
        run_pack(one, workers, search, probe=True)[3]["cpu_s"].get("thread main", 0.0)
        for _ in range(5)
    )


def cmd_cpu():
    print(f"# CPU shares (median of {CPU_ROUNDS} runs), binary {PACKER}")
    for name in DROPS:
        d = drop_dir(name)
        warm(d)
        for search in (False, True):
            table = {}
            totals = {}
            serial = {}
            files = {}
            for w in WORKERS:
                runs = [shares(run_pack(d, w, search, probe=True)[3]) for _ in range(CPU_ROUNDS)]
                keys = runs[0][0].keys()
                table[w] = {k: statistics.median(r[0].get(k, 0.0) for r in runs) for k in keys}
                totals[w] = statistics.median(r[1] for r in runs)
                main = table[w][MAIN]
                fixed = 100.0 * fixed_main_cpu(d, w, search) / totals[w]
                table[w]["  main: fixed (its CPU on a one-run pack)"] = fixed
                serial[w] = main - fixed + table[w][COMMIT]
                # The kernel takes one write into a file at a time (the inode's lock), so each
                # file's copy span is serial too; the busiest file's is the one that binds.
                files[w] = max(table[w].get(FILE_SPAN + f, 0.0) for f in ("steps", "search"))
            print(f"\n## {name}, {'--search-stats' if search else 'no --search-stats'} "
                  f"(load {load():.1f})")
            print("| thread | " + " | ".join(f"{w} worker{'s' if w > 1 else ''}" for w in WORKERS) + " |")
            print("|---|" + "---:|" * len(WORKERS))
            keys = list(dict.fromkeys(k for w in WORKERS for k in table[w]))
            for k in keys:
                print(f"| {k} | " + " | ".join(f"{table[w].get(k, 0.0):.2f}%" for w in WORKERS) + " |")
            print("| process CPU s | " + " | ".join(f"{totals[w]:.3f}" for w in WORKERS) + " |")
            s = max(serial.values()) / 100.0
            f = max(files.values()) / 100.0
            preds = ", ".join(
                f"{n} cores: efficiency {amdahl_efficiency(s + f, n):.2f} "
                f"({amdahl_efficiency(s + f, n) / amdahl_efficiency(s + f, 2):.2f} of the 2-core one)"
                for n in (16, 64)
            )
            print(f"\nserial shares (largest): the main thread's less its fixed part, plus the "
                  f"commits, {100 * s:.2f}%; the writes into the busiest file {100 * f:.2f}% "
                  f"-> Amdahl on their sum: {preds}; pipeline bound (the busiest serial part "
                  f"saturated): {1 / max(s, f):.0f} workers")


def cmd_ratio():
    print(f"# pack --workers 2 ÷ libdeflate floor at 2 threads, {ROUNDS} paired rounds, binary {PACKER}")
    print("| drop | --search-stats | floor s (median) | pack s (median) | pack ÷ floor, paired median (range) | "
          "by CPU time: floor CPU ÷ pack CPU | load avg (range) |")
    print("|---|---|---:|---:|---|---:|---|")
    walls, paired = {}, {}
    for name in DROPS:
        d = drop_dir(name)
        warm(d)
        for search in (False, True):
            ratios, floors, packs, cpu_ratios, loads = [], [], [], [], []
            for _ in range(ROUNDS):
                loads.append(load())
                f, fcpu = run_floor(d, 2)
                p, pcpu, _, _ = run_pack(d, 2, search)
                floors.append(f)
                packs.append(p)
                ratios.append(f / p)
                cpu_ratios.append(fcpu / pcpu)
            walls[(name, search)] = packs
            paired[(name, search)] = statistics.median(ratios)
            print(f"| {name} | {'yes' if search else 'no'} | {statistics.median(floors):.3f} | "
                  f"{statistics.median(packs):.3f} | **{statistics.median(ratios):.2f}** "
                  f"({min(ratios):.2f}–{max(ratios):.2f}) | {statistics.median(cpu_ratios):.2f} | "
                  f"{statistics.median(loads):.1f} ({min(loads):.1f}–{max(loads):.1f}) |")
    # The two packs ran in different rounds: their wall times are compared through the floor
    # of their own rounds (pack ÷ floor), which takes out what the machine did meanwhile.
    print("\n--search-stats cost at 2 workers (pack ÷ floor without ÷ with; median wall times):")
    for name in DROPS:
        a = statistics.median(walls[(name, False)])
        b = statistics.median(walls[(name, True)])
        rel = paired[(name, False)] / paired[(name, True)] - 1
        print(f"- {name}: {100 * rel:+.1f}% ({100 * (b / a - 1):+.1f}% by median wall time)")


def cmd_rss():
    print("# peak RSS, pack --workers 2 (KiB, largest of 3)")
    print(f"| drop | --search-stats | {RUNS // 2} runs ({RUNS // 2 * RUN_ROWS:,} rows) | "
          f"{RUNS} runs ({RUNS * RUN_ROWS:,} rows) |")
    print("|---|---|---:|---:|")
    for name in DROPS:
        d = drop_dir(name)
        half = subset(d, RUNS // 2, "half")
        for search in (False, True):
            r = [max(run_pack(x, 2, search)[2] for _ in range(3)) for x in (half, d)]
            print(f"| {name} | {'yes' if search else 'no'} | {r[0]} | {r[1]} |")


def written_bytes(pack):
    """Bytes each file of a finished pack holds on disk (holes left out: pack does not write
    them)."""
    return {f: min(os.stat(os.path.join(pack, f)).st_blocks * 512,
                   os.path.getsize(os.path.join(pack, f)))
            for f in sorted(os.listdir(pack))}


def write_cpu(sizes):
    """CPU time (user + sys of this process) to write `sizes` bytes into fresh files under OUT
    with 256 KiB pwrites from a buffer already in cache: what pack's output alone costs."""
    chunk = os.urandom(256 * 1024)
    out = tempfile.mkdtemp(prefix="scal-write-", dir=OUT)
    before = os.times()
    for name, size in sizes.items():
        fd = os.open(os.path.join(out, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        pos = 0
        while pos < size:
            pos += os.pwrite(fd, chunk[: min(len(chunk), size - pos)], pos)
        os.close(fd)
    now = os.times()
    shutil.rmtree(out)
    return (now.user - before.user) + (now.system - before.system)


def cmd_bound():
    """How close to the floor a pack could come if parsing cost nothing: it still has to
    decompress (the floor, F) and write its output (W), so pack ÷ floor <= F / (F + W). What
    the 0.7 goal leaves for parsing and the rest is F / 0.7 - F - W; divided into the drop's
    JSON bytes, that is the speed a parser would need, per core."""
    print(f"# the ceiling of pack ÷ floor at 2 workers by CPU time, medians of {ROUNDS} rounds, "
          f"binary {PACKER}")
    print("| drop | --search-stats | bytes written MB | floor F s | writing W s | pack P s | "
          "F ÷ P | ceiling F ÷ (F + W) | parsing and the rest, P − F − W s | "
          "what 0.7 leaves for it s | × cheaper needed | JSON GB/s a core: now, needed |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for name in DROPS:
        d = drop_dir(name)
        warm(d)
        for search in (False, True):
            keep = tempfile.mkdtemp(prefix="scal-bound-", dir=OUT)
            run_pack(d, 2, search, out_dir=keep)
            sizes = written_bytes(os.path.join(keep, "pack"))
            shutil.rmtree(keep)
            floors, writes, packs = [], [], []
            for _ in range(ROUNDS):
                report, cpu = floor_report(d, 2)
                # What a parser has to read: the drop's decompressed size.
                text = report["decompressed_bytes"]
                floors.append(cpu)
                writes.append(write_cpu(sizes))
                packs.append(run_pack(d, 2, search)[1])
            f, w, p = (statistics.median(x) for x in (floors, writes, packs))
            rest, budget = p - f - w, f / 0.7 - f - w
            print(f"| {name} | {'yes' if search else 'no'} | {sum(sizes.values()) / 1e6:.0f} | "
                  f"{f:.3f} | {w:.3f} | {p:.3f} | {f / p:.2f} | {f / (f + w):.2f} | {rest:.3f} | "
                  f"{budget:.3f} | {rest / budget:.1f} | {text / rest / 1e9:.1f}, "
                  f"{text / budget / 1e9:.1f} |", flush=True)


def cmd_lock(per_thread=128 << 20, chunk=256 * 1024):
    """Two threads `pwrite` 256 KiB pieces (a run's rows are written so) into disjoint halves of
    one file, then each into a file of its own, on OUT. Buffered writes into one file take the
    inode's lock (tmpfs, ext4 and XFS alike), so the first does not scale and the second does:
    the writes into each file of a pack are serial work, whichever worker runs them."""
    import threading

    data = os.urandom(chunk)

    def fill(fd, base):
        for pos in range(0, per_thread, chunk):
            os.pwrite(fd, data, base + pos)

    def once(same):
        out = tempfile.mkdtemp(prefix="scal-lock-", dir=OUT)
        names = ["one"] if same else ["a", "b"]
        fds = [os.open(os.path.join(out, n), os.O_WRONLY | os.O_CREAT, 0o644) for n in names]
        jobs = [(fds[0], 0), (fds[0], per_thread)] if same else [(fds[0], 0), (fds[1], 0)]
        before, t = os.times(), time.perf_counter()
        threads = [threading.Thread(target=fill, args=j) for j in jobs]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        wall, now = time.perf_counter() - t, os.times()
        for fd in fds:
            os.close(fd)
        shutil.rmtree(out)
        return wall, (now.user - before.user) + (now.system - before.system)

    print(f"# 2 threads writing {2 * per_thread >> 20} MiB in {chunk >> 10} KiB pwrites on {OUT}, "
          f"medians of {ROUNDS}")
    print("| into | wall s | CPU s | GB/s |")
    print("|---|---:|---:|---:|")
    for same in (True, False):
        runs = [once(same) for _ in range(ROUNDS)]
        wall = statistics.median(r[0] for r in runs)
        cpu = statistics.median(r[1] for r in runs)
        print(f"| {'one file' if same else 'a file each'} | {wall:.3f} | {cpu:.3f} | "
              f"{2 * per_thread / wall / 1e9:.2f} |")


def cmd_ab(old, new):
    """Paired rounds: the floor, then both binaries in alternating order; CPU time (user + sys
    of the process), which contention moves far less than wall time."""
    print(f"# pack --workers 2 by CPU time, {ROUNDS} paired rounds: A = {old}, B = {new}")
    print("| drop | --search-stats | floor CPU s | A CPU s (range) | B CPU s (range) | "
          "B vs A (paired median) | floor ÷ A | floor ÷ B | load |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    for name in DROPS:
        d = drop_dir(name)
        warm(d)
        for search in (False, True):
            cpu = {old: [], new: []}
            floors, loads = [], []
            for r in range(ROUNDS):
                loads.append(load())
                floors.append(run_floor(d, 2)[1])
                for b in ((old, new) if r % 2 == 0 else (new, old)):
                    cpu[b].append(run_pack(d, 2, search, packer=b)[1])
            f = statistics.median(floors)
            a, b = statistics.median(cpu[old]), statistics.median(cpu[new])
            rel = statistics.median(y / x for x, y in zip(cpu[old], cpu[new]))
            print(f"| {name} | {'yes' if search else 'no'} | {f:.3f} | {a:.3f} "
                  f"({min(cpu[old]):.2f}–{max(cpu[old]):.2f}) | {b:.3f} "
                  f"({min(cpu[new]):.2f}–{max(cpu[new]):.2f}) | {100 * (rel - 1):+.1f}% | "
                  f"{f / a:.2f} | {f / b:.2f} | {statistics.median(loads):.1f} |", flush=True)


def main():
    modes = sys.argv[1:] or ["all"]
    os.makedirs(DIR, exist_ok=True)
    make_drops()
    if modes[0] == "ab":
        if len(modes) != 3:
            sys.exit("usage: bench/scaling.py ab OLD_BINARY NEW_BINARY")
        cmd_ab(os.path.realpath(modes[1]), os.path.realpath(modes[2]))
        return
    for m in modes:
        if m in ("cpu", "all"):
            cmd_cpu()
        if m in ("ratio", "all"):
            cmd_ratio()
        if m in ("rss", "all"):
            cmd_rss()
        if m == "bound":
            cmd_bound()
        if m == "lock":
            cmd_lock()


if __name__ == "__main__":
    main()
