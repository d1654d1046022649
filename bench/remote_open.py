#!/usr/bin/env python3
"""What opening the latest version of a remote pack costs, in requests and milliseconds, as
its number of commits grows.

    target/test-venv/bin/python bench/remote_open.py [--commits 1,1000,10000] [--repeat 5]
        [--max-setup 120]

Needs moto[server], boto3 and obstore (tests/python/requirements.txt) and the release binary
(`target/release/dataset-packer`, or `DATASET_PACKER_BIN`; copied to a temporary folder once,
so a rebuild meanwhile changes nothing measured). Not part of CI. Writes nothing but
temporary folders, removed at the end.

1. Starts moto's S3 server the way the tests do (`tests/python/moto_server.py PORT`) and, in
   this process, a counting HTTP proxy in front of it: every request is forwarded with
   `Connection: close` (one TCP connection a request) and counted by method and kind (LIST
   of `_versions/`, GET of a commit record, of `metadata.db`, of `valuation_types.json`, of
   another object, anything else), with the time the server took to answer it.
2. For each N: packs `fixtures/raw` to `s3://bench/open/pN` (`pack --shard-rows 500`, commit
   1), then fabricates commits 2..N by writing copies of record 1 with `commit` = n and
   `parent` = n - 1 (the same files) with obstore, straight to moto. The largest N is only
   set up if the ones before it predict that its setup takes less than `--max-setup` seconds.
   Every pack is set up before anything is measured, so every listing runs on the same
   bucket.
3. For each pack (and a local copy of the pack, for comparison): runs `versions PACK` and
   `stats PACK --json` once to warm the cache, then `--repeat` times through the proxy
   (requests, wall ms) and `--repeat` times straight to moto (wall ms); and times the Python
   `Pack(url, cache=…)` open (in a fresh interpreter each time, imports excluded) the same way.
4. Prints a markdown table: requests of one warm run by kind, median and min wall ms through
   the proxy and direct, the median over the proxied runs of the time spent in requests
   (each from its head reaching the proxy to the server's answer read to the end, summed:
   requests made at once count each), and of that time per LIST page.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

REPO = Path(__file__).resolve().parents[1]
MOTO_SERVER = REPO / "tests/python/moto_server.py"
BUCKET = "bench"
PREFIX = "open"

# ---------------------------------------------------------------------------- the proxy


def classify(method: str, target: str) -> str:
    """The kind of an S3 request (path-style: `/bucket/key?query`)."""
    parts = urlsplit(target)
    query = parse_qs(parts.query, keep_blank_values=True)
    path = unquote(parts.path).lstrip("/")
    _bucket, _, key = path.partition("/")
    if method == "GET" and not key and ("list-type" in query or "prefix" in query):
        prefix = query.get("prefix", [""])[0]
        return "LIST _versions/" if prefix.rstrip("/").endswith("_versions") else "LIST other"
    name = key.rsplit("/", 1)[-1]
    if method in ("GET", "HEAD") and key:
        if key.split("/")[-2:-1] == ["_versions"] and name.endswith(".json"):
            return f"{method} record"
        if name in ("metadata.db", "valuation_types.json"):
            return f"{method} {name}"
        return f"{method} other object"
    return f"{method} other"


def read_head(sock: socket.socket, buf: bytes) -> tuple[bytes | None, bytes]:
    """(the head up to and with its blank line, what was read after it); None at EOF."""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            return None, buf
        buf += chunk
    end = buf.index(b"\r\n\r\n") + 4
    return buf[:end], buf[end:]


def read_exactly(sock: socket.socket, buf: bytes, n: int) -> bytes:
    while len(buf) < n:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("the client closed the connection inside a request body")
        buf += chunk
    return buf


def read_chunked(sock: socket.socket, buf: bytes) -> bytes:
    """A whole chunked body, as sent (the framing kept)."""
    pos = 0
    while True:
        while b"\r\n" not in buf[pos:]:
            buf = read_exactly(sock, buf, len(buf) + 1)
        line_end = buf.index(b"\r\n", pos)
        size = int(buf[pos:line_end].split(b";")[0], 16)
        pos = line_end + 2
        if size == 0:  # trailers, then a blank line
            while True:
                while b"\r\n" not in buf[pos:]:
                    buf = read_exactly(sock, buf, len(buf) + 1)
                line_end = buf.index(b"\r\n", pos)
                blank = line_end == pos
                pos = line_end + 2
                if blank:
                    return buf[:pos]
        buf = read_exactly(sock, buf, pos + size + 2)
        pos += size + 2


def with_close(head: bytes) -> bytes:
    """The head with its hop-by-hop connection headers replaced by `Connection: close`."""
    lines = head[:-4].split(b"\r\n")
    kept = [lines[0]] + [line for line in lines[1:] if line.split(b":", 1)[0].strip().lower()
                         not in (b"connection", b"keep-alive", b"proxy-connection")]
    return b"\r\n".join(kept + [b"Connection: close"]) + b"\r\n\r\n"


class CountingProxy:
    """A threaded HTTP forwarder on 127.0.0.1 to `upstream_port`: one request a connection
    (both sides are told `Connection: close`), each counted by kind with the time from its
    head received to the server's answer read to the end."""

    def __init__(self, upstream_port: int):
        self.upstream_port = upstream_port
        self.lock = threading.Lock()
        self.inflight = 0  # connections accepted and not yet closed
        self.reset()
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(128)
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def reset(self) -> None:
        with self.lock:
            self.counts: Counter = Counter()
            self.seconds: defaultdict = defaultdict(float)
            self.errors: list[str] = []

    def snapshot(self) -> tuple[Counter, dict, list]:
        """What was counted, once no request is under way (a client may exit before the
        proxy has read the server's end of the connection)."""
        deadline = time.monotonic() + 30
        while True:
            with self.lock:
                if self.inflight == 0 or time.monotonic() > deadline:
                    return Counter(self.counts), dict(self.seconds), list(self.errors)
            time.sleep(0.005)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                self.inflight += 1
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        upstream, kind = None, None
        try:
            client.settimeout(120)
            head, rest = read_head(client, b"")
            if head is None:
                return
            start = time.perf_counter()
            request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
            method, target, _version = request_line.split(" ", 2)
            kind = classify(method, target)
            with self.lock:
                self.counts[kind] += 1
            headers = {}
            for line in head[:-4].split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                headers[name.strip().lower()] = value.strip()
            if b"chunked" in headers.get(b"transfer-encoding", b"").lower():
                body = read_chunked(client, rest)
            else:
                length = int(headers.get(b"content-length", b"0") or 0)
                body = read_exactly(client, rest, length)[:length]
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=120)
            upstream.sendall(with_close(head) + body)
            answer, rest = read_head(upstream, b"")
            if answer is None:
                raise ConnectionError("the server closed the connection without an answer")
            client.sendall(with_close(answer) + rest)
            while True:  # the server closes the connection after its answer
                chunk = upstream.recv(1 << 20)
                if not chunk:
                    break
                client.sendall(chunk)
            elapsed = time.perf_counter() - start
            with self.lock:
                self.seconds[kind] += elapsed
        except Exception as e:  # noqa: BLE001 (counted: a run with errors is reported)
            with self.lock:
                self.errors.append(f"{kind or 'request'}: {type(e).__name__}: {e}")
        finally:
            with self.lock:
                self.inflight -= 1
            for s in (upstream, client):
                if s is not None:
                    try:
                        s.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                    s.close()


# ---------------------------------------------------------------------------- setup


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_moto() -> tuple[subprocess.Popen, int, dict]:
    port = free_port()
    server = subprocess.Popen([sys.executable, str(MOTO_SERVER), str(port)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = server.stdout.readline()
    try:
        keys = json.loads(line)
    except ValueError:
        server.kill()
        raise SystemExit(f"moto did not start: {line!r}") from None
    return server, port, keys


def s3_env(keys: dict, port: int, cache: Path) -> dict:
    return {**os.environ, "AWS_ACCESS_KEY_ID": keys["key"],
            "AWS_SECRET_ACCESS_KEY": keys["secret"], "AWS_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ALLOW_HTTP": "true",
            "DATASET_PACKER_CACHE": str(cache)}


def copy_binary(into: Path) -> Path:
    """The release binary, copied once (waiting while a build has it missing)."""
    source = Path(os.environ.get("DATASET_PACKER_BIN", REPO / "target/release/dataset-packer"))
    copy = into / "dataset-packer"
    for attempt in range(120):
        try:
            shutil.copy2(source, copy)
            subprocess.run([copy, "--version"], check=True, capture_output=True)
            return copy
        except (OSError, subprocess.CalledProcessError) as e:
            if attempt == 0:
                print(f"waiting for {source} ({e})", file=sys.stderr)
            time.sleep(5)
    raise SystemExit(f"{source}: not there or not runnable after 10 minutes")


def run(cmd: list, env: dict) -> subprocess.CompletedProcess:
    done = subprocess.run([str(c) for c in cmd], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(map(str, cmd))} failed ({done.returncode}):\n"
                         f"{done.stderr[-3000:]}")
    return done


async def fabricate(env: dict, key_prefix: str, n: int, concurrency: int = 32) -> None:
    """Records 2..n: copies of record 1 with `commit` = k and `parent` = k - 1."""
    import obstore
    from obstore.store import S3Store

    store = S3Store(BUCKET, endpoint=env["AWS_ENDPOINT_URL"], region="us-east-1",
                    access_key_id=env["AWS_ACCESS_KEY_ID"],
                    secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
                    client_options={"allow_http": True})
    first = json.loads(bytes(await (await obstore.get_async(
        store, f"{key_prefix}/_versions/{2**64 - 2:020}.json")).bytes_async()))
    numbers = iter(range(2, n + 1))

    async def worker():
        for k in numbers:
            record = dict(first, commit=k, parent=k - 1)
            await obstore.put_async(store, f"{key_prefix}/_versions/{2**64 - 1 - k:020}.json",
                                    json.dumps(record, indent=2).encode())

    await asyncio.gather(*(worker() for _ in range(concurrency)))


def set_up(n: int, binary: Path, env: dict, work: Path) -> float:
    """Packs fixtures/raw to s3://bench/open/pN and fabricates commits 2..n; seconds taken."""
    start = time.perf_counter()
    run([binary, "pack", "--input", REPO / "fixtures/raw", "--output",
         f"s3://{BUCKET}/{PREFIX}/p{n}", "--shard-rows", "500", "--quiet"], env)
    if n > 1:
        asyncio.run(fabricate(env, f"{PREFIX}/p{n}", n))
    return time.perf_counter() - start


# ---------------------------------------------------------------------------- measuring

PYTHON_OPEN = """
import json, sys, time
import obstore, google_crc32c, xxhash  # imported by the open: not timed
from dataset_packer import Pack
start = time.perf_counter()
pack = Pack(sys.argv[1], cache=sys.argv[2])
ms = (time.perf_counter() - start) * 1000
rows = len(pack)
pack.close() if hasattr(pack, "close") else None
print(json.dumps({"ms": ms, "rows": rows}))
"""


def timed(cmd: list, env: dict, python: bool) -> float:
    """Wall ms of a command; for the Python open, the ms of `Pack(…)` in the child."""
    start = time.perf_counter()
    done = run(cmd, env)
    ms = (time.perf_counter() - start) * 1000
    return json.loads(done.stdout.strip().splitlines()[-1])["ms"] if python else ms


def measure(name: str, cmd: list, python: bool, proxy: CountingProxy | None, env_proxy: dict,
            env_direct: dict, repeat: int) -> dict:
    timed(cmd, env_direct, python)  # warms the cache (and the page cache)
    through, counts, seconds, errors = [], None, [], []
    for _ in range(repeat):
        if proxy is not None:
            proxy.reset()
        through.append(timed(cmd, env_proxy, python))
        if proxy is not None:
            got, run_seconds, errs = proxy.snapshot()
            seconds.append(run_seconds)
            errors += errs
            if counts is not None and got != counts:
                errors.append(f"requests differ between runs: {dict(counts)} then {dict(got)}")
            counts = got
    direct = [timed(cmd, env_direct, python) for _ in range(repeat)]
    return {"name": name, "counts": counts, "seconds": seconds, "errors": errors,
            "through": through, "direct": direct}


def fmt_counts(counts: Counter | None) -> list[str]:
    if counts is None:
        return ["-"] * 6
    main = ["LIST _versions/", "GET record", "GET metadata.db", "GET valuation_types.json"]
    other = ", ".join(f"{k} ×{v}" for k, v in sorted(counts.items()) if k not in main)
    return [str(counts.get(k, 0)) for k in main] + [other or "-", str(sum(counts.values()))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commits", default="1,1000,10000",
                        help="the numbers of commits, comma-separated (default 1,1000,10000)")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs of each (default 5)")
    parser.add_argument("--max-setup", type=float, default=120,
                        help="skip the largest N if its setup is predicted to take longer "
                             "than this many seconds (default 120)")
    args = parser.parse_args()
    sizes = sorted({int(x) for x in args.commits.split(",")})

    work = Path(tempfile.mkdtemp(prefix="remote-open-"))
    server = None
    try:
        binary = copy_binary(work)
        version = run([binary, "--version"], dict(os.environ)).stdout.strip()
        server, port, keys = start_moto()
        import boto3

        boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1",
                     aws_access_key_id=keys["key"], aws_secret_access_key=keys["secret"]
                     ).create_bucket(Bucket=BUCKET)
        proxy = CountingProxy(port)
        cache = work / "cache"
        env_direct = s3_env(keys, port, cache)
        env_proxy = s3_env(keys, proxy.port, cache)

        setups = {}
        for i, n in enumerate(sizes):
            if i == len(sizes) - 1 and i > 0 and sizes[i - 1] > 1:
                # setup ≈ a pack + (n - 1) record writes, at the rate the last one had
                prev = sizes[i - 1]
                pack_s = setups[sizes[0]]
                per_record = max(setups[prev] - pack_s, 0) / (prev - 1)
                predicted = pack_s + per_record * (n - 1)
                if predicted > args.max_setup:
                    print(f"skipping N={n}: its setup would take about {predicted:.0f} s",
                          file=sys.stderr)
                    break
            setups[n] = set_up(n, binary, env_direct, work)
            print(f"set up N={n} in {setups[n]:.1f} s", file=sys.stderr)

        local = work / "local"
        run([binary, "pack", "--input", REPO / "fixtures/raw", "--output", local,
             "--shard-rows", "500", "--quiet"], env_direct)

        rows = []
        targets = [("local", str(local))] + [(str(n), f"s3://{BUCKET}/{PREFIX}/p{n}")
                                              for n in setups]
        for label, url in targets:
            remote = label != "local"
            for what, cmd, python in [
                ("`versions`", [binary, "versions", url], False),
                ("`stats --json`", [binary, "stats", url, "--json"], False),
                ("Python `Pack(url)`", [sys.executable, "-c", PYTHON_OPEN, url, cache], True),
            ]:
                m = measure(what, cmd, python, proxy if remote else None, env_proxy,
                            env_direct, args.repeat)
                rows.append((label, m))
                print(f"measured {label} {what}", file=sys.stderr)

        load = os.getloadavg()
        print(f"\n{version}, {os.cpu_count()} CPUs, load average {load[0]:.1f} "
              f"{load[1]:.1f} {load[2]:.1f}, median and min of {args.repeat} warm runs; "
              f"setup s: " + ", ".join(f"N={n}: {s:.1f}" for n, s in setups.items()) + "\n")
        print("| commits | command | LIST `_versions/` | GET record | GET metadata.db "
              "| GET valuation_types.json | other requests | total | ms via proxy (median / "
              "min) | ms in requests | ms direct (median / min) | ms per LIST page |")
        print("| ---: | --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: "
              "| ---: |")
        for label, m in rows:
            c = m["counts"]
            pages = c.get("LIST _versions/", 0) if c else 0
            list_ms = [r["LIST _versions/"] * 1000 for r in m["seconds"]] if pages else []
            per_page = f"{statistics.median(list_ms) / pages:.0f}" if pages else "-"
            via = (f"{statistics.median(m['through']):.0f} / {min(m['through']):.0f}"
                   if c is not None else "-")
            in_requests = (f"{statistics.median(sum(r.values()) for r in m['seconds']) * 1000:.0f}"
                           if c is not None else "-")
            print(f"| {label} | {m['name']} | " + " | ".join(fmt_counts(c)) +
                  f" | {via} | {in_requests} | {statistics.median(m['direct']):.0f} / "
                  f"{min(m['direct']):.0f} | {per_page} |")
        errors = [(label, m["name"], e) for label, m in rows for e in m["errors"]]
        for label, name, e in errors:
            print(f"\nerror ({label}, {name}): {e}", file=sys.stderr)
        if errors:
            sys.exit(1)
    finally:
        if server is not None:
            server.stdin.close()
            try:
                server.wait(30)
            except subprocess.TimeoutExpired:
                server.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
