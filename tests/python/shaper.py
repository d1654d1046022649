#!/usr/bin/env python3
"""A link-shaping TCP proxy in front of the S3 server of the tests and benches: what a
trainer's node sees of a bucket, on localhost.

    python tests/python/shaper.py UPSTREAM_PORT [--latency 0.025]
        [--per-connection 16e6] [--total 64e6]

- `--latency` seconds pass before anything the client sends reaches the server (each
  request, and each new connection);
- the server's answers reach the client at most `--per-connection` bytes per second on each
  connection, and at most `--total` bytes per second over all of them together.

It prints `ready PORT` (the port it listens on) and serves until its standard input closes.
A line `stats` on its standard input is answered by a JSON line: connections opened,
requests and ranged requests seen (HTTP/1.1 request heads and `Range:` headers in what the
client sent) and bytes passed to the client.

`start(upstream_port, …)` runs it in a child process (never in the process it shapes: its
threads would share that process's interpreter lock) and gives back a `Shaper`.
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

CHUNK = 64 << 10
BURST = 2 * CHUNK
_REQUEST = re.compile(rb"(?:^|\r\n)(?:GET|HEAD|PUT|POST|DELETE) [^ ]+ HTTP/1\.[01]\r\n")
_RANGE = re.compile(rb"\r\nrange: *bytes=", re.IGNORECASE)


class Link:
    """The shared part of the link: all connections' bytes, at most `total` per second."""

    def __init__(self, latency: float, per_connection: float, total: float):
        self.latency, self.per_connection, self.total = latency, per_connection, total
        self.lock = threading.Lock()
        self.due = 0.0  # when the link is due to take the next byte
        self.stats = {"connections": 0, "requests": 0, "ranged": 0, "bytes": 0}

    def send(self, conn: socket.socket, data: bytes, state: dict) -> None:
        """`data` sent on `conn` when both its connection and the link can take it. Each
        rate is kept the way a token bucket keeps it (the generic cell rate algorithm): a
        send may come up to `BURST` bytes' time early, which makes up for sleeps that
        overshoot, and never lets the rate over its figure in the long run."""
        n = len(data)
        _wait_until(state["due"] - BURST / self.per_connection)
        with self.lock:
            due = max(time.monotonic(), self.due)
            self.due = due + n / self.total
            self.stats["bytes"] += n
        _wait_until(due - BURST / self.total)
        conn.sendall(data)
        state["due"] = max(state["due"], time.monotonic() - BURST / self.per_connection) + \
            n / self.per_connection

    def count(self, head: bytes) -> None:
        with self.lock:
            self.stats["requests"] += len(_REQUEST.findall(head))
            self.stats["ranged"] += len(_RANGE.findall(head))


def serve(client: socket.socket, upstream: int, link: Link) -> None:
    """One connection: the client's bytes to the server after the latency, the server's
    back at the link's pace."""
    time.sleep(link.latency)
    try:
        server = socket.create_connection(("127.0.0.1", upstream))
    except OSError:
        client.close()
        return
    with link.lock:
        link.stats["connections"] += 1
    state = {"due": 0.0}

    def up() -> None:
        try:
            while data := client.recv(CHUNK):
                link.count(data)
                time.sleep(link.latency)
                server.sendall(data)
        except OSError:
            pass
        finally:
            _shut(server, socket.SHUT_WR)

    def down() -> None:
        try:
            while data := server.recv(CHUNK):
                link.send(client, data, state)
        except OSError:
            pass
        finally:
            _shut(client, socket.SHUT_WR)

    threading.Thread(target=up, daemon=True).start()
    down()
    client.close()
    server.close()


def _wait_until(moment: float) -> None:
    wait = moment - time.monotonic()
    if wait > 0:
        time.sleep(wait)


def _shut(sock: socket.socket, how: int) -> None:
    try:
        sock.shutdown(how)
    except OSError:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("upstream", type=int)
    parser.add_argument("--latency", type=float, default=0.025)
    parser.add_argument("--per-connection", type=float, default=16e6)
    parser.add_argument("--total", type=float, default=64e6)
    args = parser.parse_args()
    link = Link(args.latency, args.per_connection, args.total)
    listener = socket.create_server(("127.0.0.1", 0))
    listener.listen(256)

    def accept() -> None:
        while True:
            conn, _ = listener.accept()
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=serve, args=(conn, args.upstream, link), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    print(f"ready {listener.getsockname()[1]}", flush=True)
    for line in sys.stdin:
        if line.strip() == "stats":
            with link.lock:
                print(json.dumps(link.stats), flush=True)


class Shaper:
    """A running shaper (see `start`): `port`, `stats()`, `close()`."""

    def __init__(self, process: subprocess.Popen, port: int):
        self.process, self.port = process, port

    def stats(self) -> dict:
        self.process.stdin.write("stats\n")
        self.process.stdin.flush()
        return json.loads(self.process.stdout.readline())

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(10)


def start(upstream: int, latency: float = 0.025, per_connection: float = 16e6,
          total: float = 64e6) -> Shaper:
    """The shaper in a child process, in front of `upstream` (a port on localhost)."""
    process = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), str(upstream), "--latency",
         str(latency), "--per-connection", str(per_connection), "--total", str(total)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = process.stdout.readline().split()
    if len(line) != 2 or line[0] != "ready":
        process.kill()
        raise RuntimeError(f"the shaper did not start: {line!r}")
    return Shaper(process, int(line[1]))


if __name__ == "__main__":
    main()
