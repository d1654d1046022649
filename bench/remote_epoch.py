#!/usr/bin/env python3
"""Epochs of a pack in object storage against the same pack on local disk (issue 32, item 6).

    target/test-venv/bin/python bench/remote_epoch.py [--runs 100] [--rows-per-run 20000]
        [--shard-rows 50000] [--batch 4096] [--rounds 3] [--naive]
        [--workdir target/bench/remote-epoch]

Needs the `[s3]` extra (obstore, google-crc32c, xxhash) and moto[server] (both in
tests/python/requirements.txt), the release binary and its `bench_corpus` example
(`cargo build --release --example bench_corpus`). Not part of CI.

1. Generates a drop of `runs × rows-per-run` rows with `bench_corpus` (the command benchmarks'
   generator; 2M rows by default) and packs it with `--shard-rows` (once; kept in
   `--workdir`).
2. Starts moto's S3 server on localhost in a child process, behind a WSGI wrapper that counts
   the bytes of every GET response (asked for between epochs) and serves ranged GETs from
   the object's buffer at the cost of the range, as S3 does (moto itself copies the whole
   object for each: 20 ms for a range of a 48 MB shard), and publishes the pack to
   `s3://bench/pack` (shards first, metadata.db last).
3. Reads one epoch each, in this process, with `EpochStream(pack, batch, seed=0,
   order="auto")` (decoded, shuffled batches; what a DataLoader worker does):
   - `local`: the local pack (global order), and `local, shard windows` (the shard-window
     order of a quarter of the pack: the cost of the order itself, nothing fetched);
   - `download only`: every shard fetched into an empty cache and nothing read (the floor
     of a cold epoch: the server's, the client's and the cache's share);
   - `cold`: the remote pack, empty cache, limit 2 × the pack (global order, every shard
     fetched ahead from the start);
   - `warm`: the same again, on the cache the cold epoch filled;
   - `half cache, epoch 0/1`: empty cache of half the pack's bytes: shard windows of a quarter
     of the pack, read ahead; two epochs in a row (each must download the pack about once);
   - `global, half cache` (with `--naive`): the global order on that cache, which has to give
     up (its shards stay mapped, so the cache fills with shards in use).
   For each: rows/s (wall clock, first batch included), bytes served by the server, and the
   peak size of the cache's entries (files and downloads under way, polled every 20 ms);
   the median of `--rounds` rounds, each on fresh caches.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

SERVER = textwrap.dedent("""
    import json, logging, re, sys, threading
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends
    from moto.server import DomainDispatcherApplication, create_backend_app
    from werkzeug.serving import make_server

    app = DomainDispatcherApplication(create_backend_app)
    lock = threading.Lock()
    count = {"bytes": 0, "gets": 0}
    RANGE = re.compile(r"bytes=(\d+)-(\d*)$")

    def ranged(environ, start_response):
        # A ranged GET served from the object's buffer, at the cost of the range, as S3
        # serves it (moto copies the whole object for each one); None: moto answers.
        found = RANGE.match(environ.get("HTTP_RANGE", ""))
        if environ.get("REQUEST_METHOD") != "GET" or not found:
            return None
        bucket, _, name = environ["PATH_INFO"].lstrip("/").partition("/")
        try:
            key = s3_backends[DEFAULT_ACCOUNT_ID]["global"].buckets[bucket].keys[name]
        except Exception:
            return None
        first = int(found[1])
        last = min(int(found[2]) if found[2] else key.size - 1, key.size - 1)
        if first > last:
            return None
        with key.lock:
            key._value_buffer.seek(first)
            body = key._value_buffer.read(last - first + 1)
        start_response("206 Partial Content", [
            ("Content-Type", "application/octet-stream"), ("Content-Length", str(len(body))),
            ("Content-Range", f"bytes {first}-{last}/{key.size}"), ("ETag", key.etag),
            ("Last-Modified", key.last_modified_RFC1123), ("Accept-Ranges", "bytes")])
        return [body]

    def counting(environ, start_response):
        if environ.get("PATH_INFO") == "/__served__":
            with lock:
                body = json.dumps(count).encode()
            start_response("200 OK", [("Content-Type", "application/json")])
            yield body
            return
        get = environ.get("REQUEST_METHOD") == "GET"
        for chunk in ranged(environ, start_response) or app(environ, start_response):
            if get:
                with lock:
                    count["bytes"] += len(chunk)
            yield chunk
        if get:
            with lock:
                count["gets"] += 1

    server = make_server("127.0.0.1", int(sys.argv[1]), counting, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print("ready", flush=True)
    sys.stdin.read()
""")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def binary() -> Path:
    return Path(os.environ.get("DATASET_PACKER_BIN", REPO / "target/release/dataset-packer"))


def make_pack(args) -> Path:
    """The drop, generated and packed once."""
    work = Path(args.workdir)
    corpus = work / f"corpus-{args.runs}x{args.rows_per_run}"
    pack = work / f"pack-{args.runs}x{args.rows_per_run}-{args.shard_rows}"
    if not (corpus / ".complete").exists():
        generator = REPO / "target/release/examples/bench_corpus"
        subprocess.run([generator, "--out", corpus, "--runs", str(args.runs),
                        "--rows-per-run", str(args.rows_per_run)], check=True)
    if not (pack / "metadata.db").exists():
        shutil.rmtree(pack, ignore_errors=True)
        subprocess.run([binary(), "pack", "--input", corpus, "--output", pack, "--shard-rows",
                        str(args.shard_rows), "--quiet"], check=True)
    return pack


def start_server():
    port = free_port()
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(port)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    if server.stdout.readline().strip() != "ready":
        raise SystemExit("moto did not start")
    os.environ.update({"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
                       "AWS_REGION": "us-east-1", "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
                       "AWS_ALLOW_HTTP": "true"})
    return server, port


def served(port: int) -> int:
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with direct.open(f"http://127.0.0.1:{port}/__served__") as answer:
        return json.load(answer)["bytes"]


def publish(folder: Path, bucket: str, prefix: str) -> None:
    import boto3

    s3 = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"], region_name="us-east-1")
    s3.create_bucket(Bucket=bucket)
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.name != "metadata.db")
    for path in files + [folder / "metadata.db"]:
        s3.upload_file(str(path), bucket, f"{prefix}/{path.name}")


class CachePeak:
    """Polls the cache's entries (whole files and `.part` downloads, reserved at full
    length) in a thread: the largest total seen."""

    def __init__(self, cache: Path):
        self.entries = cache / "entries"
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _size(self) -> int:
        total = 0
        try:
            with os.scandir(self.entries) as found:
                for entry in found:
                    if not entry.name.endswith(".lock"):
                        try:
                            total += entry.stat().st_size
                        except FileNotFoundError:
                            pass
        except FileNotFoundError:
            pass
        return total

    def _poll(self):
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, self._size())

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._size())


def epoch(pack, batch: int, number: int, order: str = "auto",
          window_bytes=None) -> tuple[int, float]:
    """One shuffled epoch of decoded batches in this process: (rows, seconds)."""
    from dataset_packer._loader import EpochStream
    from dataset_packer._order import Part

    stream = EpochStream(pack, batch, seed=0, order=order, window_bytes=window_bytes)
    stream.set_epoch(number)
    rows = 0
    start = time.perf_counter()
    for b in stream.batches(Part()):
        rows += b["exps"].shape[0]
    return rows, time.perf_counter() - start


def download_only(pack, batch: int, number: int, order: str, window_bytes) -> tuple[int, float]:
    """Every shard fetched (prefetched all at once, then each one's first row read): the
    network's and the cache's part of a cold epoch, without the epoch. (rows, seconds)"""
    from dataset_packer._data import of

    data = of(pack)
    start = time.perf_counter()
    data.prefetch(list(range(len(data.shards))))
    first = 0
    for s in range(len(data.shards)):
        pack.rows(slice(first, first + 1))
        first += data.shard_rows(s)
    return len(pack), time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--rows-per-run", type=int, default=20000)
    parser.add_argument("--shard-rows", type=int, default=50000)
    parser.add_argument("--batch", type=int, default=4096)
    parser.add_argument("--workdir", default=str(REPO / "target/bench/remote-epoch"))
    parser.add_argument("--rounds", type=int, default=3,
                        help="each epoch this many times (fresh caches), the median reported")
    parser.add_argument("--naive", action="store_true",
                        help="also try the global order on the half-size cache")
    args = parser.parse_args()

    from dataset_packer import Pack
    from dataset_packer._data import of

    local = make_pack(args)
    with Pack(local) as pack:
        data = of(pack)
        pack_bytes = sum(data.shard_bytes(s) for s in range(len(data.shards)))
        print(f"pack: {len(pack):,} rows, {len(data.shards)} shards, {pack_bytes:,} bytes "
              f"of shards; batch {args.batch}; load average {os.getloadavg()[0]:.1f}",
              flush=True)
    server, port = start_server()
    try:
        publish(local, "bench", "pack")
        url = "s3://bench/pack"
        caches = Path(args.workdir) / "caches"
        results: dict = {}  # name → (order, limit, [(rows/s, seconds, bytes, peak) per round])

        def measure(name, path, cache=None, limit=None, number=0, order="auto",
                    window_bytes=None, read=epoch):
            before = served(port)
            kwargs = {} if cache is None else {"cache": cache, "cache_limit": limit}
            peak = CachePeak(cache or caches / "none")
            try:
                with peak, Pack(path, **kwargs) as pack:
                    kind, window = _order_of(pack, args.batch, order, window_bytes)
                    chosen = kind if window is None else f"{kind} ({window / 1e6:,.1f} MB)"
                    rows, seconds = read(pack, args.batch, number, order, window_bytes)
            except Exception as error:  # the naive order is expected to give up
                print(f"{name}: {error}", flush=True)
                results.setdefault(name, (order, limit, []))[2].append(None)
                return
            down = served(port) - before
            figures = (rows / seconds, seconds, down, peak.peak if cache is not None else None)
            results.setdefault(name, (chosen, limit, []))[2].append(figures)
            print(f"{name}: {chosen}, {rows / seconds:,.0f} rows/s, {seconds:.2f} s, "
                  f"{down:,} bytes served, peak cache {peak.peak:,}", flush=True)

        for _ in range(args.rounds):
            shutil.rmtree(caches, ignore_errors=True)
            measure("local", local)
            measure("local, shard windows", local, order="shards",
                    window_bytes=pack_bytes // 4)
            measure("download only (limit 2× pack)", url, caches / "download", 2 * pack_bytes,
                    read=download_only)
            full = caches / "full"
            measure("cold (limit 2× pack)", url, full, 2 * pack_bytes)
            measure("warm (same cache)", url, full, 2 * pack_bytes, number=1)
            half = caches / "half"
            measure("half cache, epoch 0", url, half, pack_bytes // 2, number=0)
            measure("half cache, epoch 1", url, half, pack_bytes // 2, number=1)
            if args.naive:
                naive = caches / "naive"
                measure("global order, half cache", url, naive, pack_bytes // 2,
                        order="global")
        print(f"\nmedian of {args.rounds} rounds; load average {os.getloadavg()[0]:.1f}\n")
        print("| epoch | order (window) | rows/s | seconds | MB downloaded (× pack) "
              "| peak cache MB (limit) |")
        print("| --- | --- | ---: | ---: | ---: | ---: |")
        for name, (chosen, limit, rounds) in results.items():
            done = [r for r in rounds if r is not None]
            if not done:
                print(f"| {name} | {chosen} | refused (cache full of shards in use) | | | |")
                continue
            speed, seconds, down, peak = (statistics.median(x) if x[0] is not None else None
                                          for x in zip(*done))
            peak_text = "-" if peak is None else f"{peak / 1e6:,.1f} ({limit / 1e6:,.1f})"
            print(f"| {name} | {chosen} | {speed:,.0f} | {seconds:.2f} | "
                  f"{down / 1e6:,.1f} ({down / pack_bytes:.2f}×) | {peak_text} |")
    finally:
        server.stdin.close()
        server.wait(30)


def _order_of(pack, batch, order, window_bytes):
    from dataset_packer._loader import EpochStream

    return EpochStream(pack, batch, order=order, window_bytes=window_bytes).epoch_order()


if __name__ == "__main__":
    main()
