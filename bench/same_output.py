#!/usr/bin/env python3
"""The comparing half of bench/same_output.sh (standard library only).

    python3 bench/same_output.py compare REF OTHER [--binary PATH]...
        Compares two trees that the same command sequence wrote: every file byte for byte,
        except metadata.db (compared table by table, schema then rows) and the commands'
        captured stdout, stderr and exit status (out/) and HTML reports (compared as text). Only what differs by design
        between two runs is masked (see MASKS below). Prints one line per difference and
        exits 1 if there is any.
    python3 bench/same_output.py array OUT.npy PACK DIM
        Writes a float32 array of shape (rows of PACK, DIM) as np.save would, with values that
        depend only on the row and column (the same bytes every time): a companion to attach.
    python3 bench/same_output.py table TIMES
        Prints the timing table from the `STEP SIDE REP SECONDS` lines of TIMES: best of the
        repetitions for each side, their ratio new / old, and the median of the ratios of
        the repetitions ("paired").
"""
import os
import re
import sqlite3
import struct
import sys

# What two runs of the same command on the same input may write differently, by design:
#   - the clock: ISO-8601 UTC times (session created_utc, versions.created_utc,
#     version_tags.created_utc, `versions` output, the report's footer);
#   - the binary's own path (the command line a pack records: session command_line,
#     versions.command);
#   - pack ids (session pack_id, drawn at random when a pack is made; version_sources.pack_id
#     and stdout repeat them): each is replaced by its order of first appearance, so a pack
#     that names the wrong source still differs;
#   - durations and rates on stdout (`elapsed 0.10 s`, `"rows_per_s":…`).
ISO_TIME = re.compile(rb"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?Z")
# A number followed by a unit of time or of speed, in the commands' text output.
TEXT_DURATION = re.compile(rb"\d[\d,]*(?:\.\d+)?(?=\s?(?:s|ms|rows/s|MB/s|GB/s|M rows/s)\b)")
# A JSON number under a key that is a duration or a rate (elapsed_s, rows_per_s, …).
JSON_DURATION = re.compile(rb'("[a-z_]*(?:_s|_per_s|_ms)"\s*:\s*)-?[0-9.eE+-]+')


def pack_ids(root):
    """Every pack id the tree's metadata.db files name, in a fixed order."""
    ids = []
    for db in sorted(find_files(root, "metadata.db")):
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            found = [r[0] for r in conn.execute(
                "SELECT meta_value FROM session WHERE meta_key LIKE '%pack_id' ORDER BY rowid")]
            if has_table(conn, "version_sources"):
                found += [r[0] for r in conn.execute(
                    "SELECT pack_id FROM version_sources ORDER BY rowid")]
        finally:
            conn.close()
        for pid in found:
            if pid and pid not in ids:
                ids.append(pid)
    return ids


def has_table(conn, name):
    return conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)).fetchone()


def find_files(root, name=None):
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            if name is None or f == name:
                yield os.path.join(dirpath, f)


class Masker:
    def __init__(self, root, binaries):
        self.ids = [(pid.encode(), b"<pack_id#%d>" % i) for i, pid in enumerate(pack_ids(root))]
        self.binaries = [b.encode() for b in sorted(binaries, key=len, reverse=True)]

    def common(self, data):
        data = ISO_TIME.sub(b"<time>", data)
        for b in self.binaries:
            data = data.replace(b, b"<binary>")
        for pid, label in self.ids:
            data = data.replace(pid, label)
        return data

    def text(self, data):
        data = JSON_DURATION.sub(rb"\1<t>", self.common(data))
        return TEXT_DURATION.sub(b"<t>", data)

    def value(self, v):
        if isinstance(v, str):
            return self.common(v.encode()).decode()
        return v


def table_dump(path, masker):
    """{table: (schema, [rows])} of a metadata.db, values masked."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        out = {}
        for name, sql in conn.execute(
                "SELECT name, sql FROM sqlite_master WHERE type IN ('table', 'index') "
                "ORDER BY type, name"):
            rows = []
            if sql and sql.upper().startswith("CREATE TABLE"):
                rows = [tuple(masker.value(v) for v in r)
                        for r in conn.execute(f'SELECT * FROM "{name}" ORDER BY rowid')]
            out[name] = (sql, rows)
        return out
    finally:
        conn.close()


def compare_db(rel, a, b, ma, mb):
    problems = []
    da, db = table_dump(a, ma), table_dump(b, mb)
    for name in sorted(set(da) | set(db)):
        if name not in da or name not in db:
            problems.append(f"{rel}: table {name} only in {'the reference' if name in da else 'the other'}")
            continue
        (sa, ra), (sb, rb) = da[name], db[name]
        if sa != sb:
            problems.append(f"{rel}: table {name}: schema differs:\n    {sa}\n    {sb}")
        elif ra != rb:
            first = next((i for i, (x, y) in enumerate(zip(ra, rb)) if x != y), min(len(ra), len(rb)))
            problems.append(
                f"{rel}: table {name}: {len(ra)} vs {len(rb)} rows, first difference at row {first}:\n"
                f"    {ra[first] if first < len(ra) else '(none)'}\n"
                f"    {rb[first] if first < len(rb) else '(none)'}")
    return problems


def first_line_difference(x, y):
    lx, ly = x.split(b"\n"), y.split(b"\n")
    for i, (p, q) in enumerate(zip(lx, ly)):
        if p != q:
            return f"line {i + 1}:\n    {p[:300]!r}\n    {q[:300]!r}"
    return f"{len(lx)} vs {len(ly)} lines"


def same_bytes(a, b):
    if os.path.getsize(a) != os.path.getsize(b):
        return False
    with open(a, "rb") as fa, open(b, "rb") as fb:
        while True:
            x, y = fa.read(1 << 20), fb.read(1 << 20)
            if x != y:
                return False
            if not x:
                return True


def listing(root):
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for f in files + [d for d in dirs if os.path.islink(os.path.join(dirpath, d))]:
            p = os.path.join(dirpath, f)
            out[os.path.relpath(p, root)] = p
    return out


def compare(ref, other, binaries):
    ma, mb = Masker(ref, binaries), Masker(other, binaries)
    la, lb = listing(ref), listing(other)
    problems = []
    for rel in sorted(set(la) ^ set(lb)):
        problems.append(f"{rel}: only in {'the reference' if rel in la else 'the other'}")
    compared = 0
    for rel in sorted(set(la) & set(lb)):
        a, b = la[rel], lb[rel]
        compared += 1
        if os.path.islink(a) or os.path.islink(b):
            if os.readlink(a) != os.readlink(b):
                problems.append(f"{rel}: symlinks differ")
        elif os.path.basename(rel) == "metadata.db":
            problems += compare_db(rel, a, b, ma, mb)
        elif rel.startswith("out" + os.sep) or rel.endswith(".html"):
            with open(a, "rb") as fa, open(b, "rb") as fb:
                x, y = ma.text(fa.read()), mb.text(fb.read())
            if x != y:
                problems.append(f"{rel}: {first_line_difference(x, y)}")
        elif not same_bytes(a, b):
            problems.append(f"{rel}: bytes differ ({os.path.getsize(a)} vs {os.path.getsize(b)} bytes)")
    for p in problems:
        print(f"  DIFFER {p}")
    print(f"  {compared} files compared, {len(problems)} differences")
    return 1 if problems else 0


def write_array(out, rows, dim):
    d = "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d), }" % (rows, dim)
    hlen = len(d) + 1
    pad = (64 - (10 + hlen) % 64) % 64
    with open(out, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + (hlen + pad).to_bytes(2, "little") + d.encode()
                + b" " * pad + b"\n")
        row_vals = [struct.pack(f"<{dim}f", *[((r * 31 + c * 7) % 1000) / 1000.0 for c in range(dim)])
                    for r in range(1000)]
        for r in range(rows):
            f.write(row_vals[r % 1000])


def table(path):
    """Best time of each side, and the median of the per-repetition ratios: a repetition runs
    old and new back to back, so its ratio is taken at one machine speed."""
    times = {}
    order = []
    with open(path) as f:
        for line in f:
            step, side, rep, secs = line.split()
            if step not in order:
                order.append(step)
            times.setdefault(step, {}).setdefault(rep, {})[side] = float(secs)
    width = max([len(s) for s in order] + [7])
    print(f"  {'command':<{width}}  {'old s':>8}  {'new s':>8}  {'new/old':>7}  {'paired':>7}")
    for step in order:
        reps = [r for r in times[step].values() if "old" in r and "new" in r]
        if not reps:
            continue
        o, n = min(r["old"] for r in reps), min(r["new"] for r in reps)
        ratios = sorted(r["new"] / r["old"] for r in reps if r["old"] > 0)
        paired = ratios[len(ratios) // 2] if len(ratios) % 2 else \
            (ratios[len(ratios) // 2 - 1] + ratios[len(ratios) // 2]) / 2
        print(f"  {step:<{width}}  {o:8.3f}  {n:8.3f}  {n / o if o else float('nan'):7.2f}  {paired:7.2f}")


def main():
    args = sys.argv[1:]
    if args[:1] == ["compare"] and len(args) >= 3:
        binaries = [args[i + 1] for i in range(3, len(args) - 1) if args[i] == "--binary"]
        sys.exit(compare(args[1], args[2], binaries))
    if args[:1] == ["array"] and len(args) == 4:
        conn = sqlite3.connect(f"file:{os.path.join(args[2], 'metadata.db')}?mode=ro", uri=True)
        rows = conn.execute("SELECT SUM(steps) FROM runs").fetchone()[0]
        conn.close()
        write_array(args[1], rows, int(args[3]))
    elif args[:1] == ["table"] and len(args) == 2:
        table(args[1])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
