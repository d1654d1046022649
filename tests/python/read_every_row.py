"""Reads a pack the way a training job opens it, for tests/concurrent_reads.rs: `Pack(path)`,
every row, and every companion family's rows; prints one line per read: the pack's
pack_id, version, rows, runs, companion names and a SHA-256 of everything read (or
`error: TYPE: MESSAGE` when the read failed).

    read_every_row.py PACK            one read
    read_every_row.py PACK SECONDS    reads again and again for SECONDS
"""

import hashlib
import sys
import time

from dataset_packer import Pack


def read(path: str) -> str:
    with Pack(path) as pack:
        digest = hashlib.sha256()
        step = 4096
        for start in range(0, len(pack), step):
            digest.update(pack.rows(slice(start, start + step)).tobytes())
        names = pack.companions
        for name in names:
            family = pack.companion(name)
            for start in range(0, len(pack), step):
                digest.update(family[start:start + step].tobytes())
        return (f"{pack.pack_id} v{pack.version} rows={len(pack)} runs={pack.num_runs} "
                f"companions={','.join(names)} sha256={digest.hexdigest()}")


def main() -> None:
    path = sys.argv[1]
    until = time.monotonic() + float(sys.argv[2]) if len(sys.argv) > 2 else None
    while True:
        try:
            line = read(path)
        except Exception as e:  # every failure is reported, none ends the loop
            line = f"error: {type(e).__name__}: {e}".replace("\n", " ")
        print(line, flush=True)
        if until is None or time.monotonic() >= until:
            break


if __name__ == "__main__":
    main()
