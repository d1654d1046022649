"""How much memory this process may fill with a pack, and what `order="auto"` makes of it.

A local pack is read through the page cache. When the bytes an epoch reads are more than
about half the memory the process may use, an epoch in the pack's global order reads every
row from disk, one page fault each (545× slower than shard windows, measured with a 96 MB
cgroup and a 369 MB pack: bench/README.md). `order="auto"` then reads shard windows instead,
sized so that two of them (the one read and the next, brought in ahead) fill at most a
quarter of that memory.

The memory is the smallest of the memory cgroup's limits on the process's cgroup and its
ancestors (v2 `memory.max`, v1 `memory.limit_in_bytes`) and the system's `MemAvailable`,
rounded down to a power of two. The rounding makes the choice the same on nodes whose
readings differ a little (ranks of one job must all choose the same order: they share its
positions), and a state records the choice, so that a resume reads on in the same order.
The reading is taken once per stream, in the process that makes it, and travels to its
workers.
"""

from __future__ import annotations

from pathlib import Path

#: The smallest window `auto` picks (a window holds at least one shard anyway).
MIN_WINDOW_BYTES = 8 << 20

#: A v1 limit at or above this means "no limit" (the kernel's unlimited value, page-aligned).
_V1_UNLIMITED = 1 << 62


def available_memory(proc: Path = Path("/proc")) -> tuple[int | None, str]:
    """The memory this process may use, in bytes rounded down to a power of two, and where
    the figure came from ("cgroup", "MemAvailable"); (None, why) where neither can be read
    (not Linux)."""
    limit = cgroup_limit(proc)
    available = mem_available(proc)
    figures = [(v, name) for v, name in ((limit, "cgroup"), (available, "MemAvailable"))
               if v is not None]
    if not figures:
        return None, "no /proc/meminfo or memory cgroup"
    value, source = min(figures)
    return 1 << (max(int(value), 1).bit_length() - 1), source


def mem_available(proc: Path = Path("/proc")) -> int | None:
    """`MemAvailable` from /proc/meminfo, in bytes."""
    try:
        for line in (proc / "meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def cgroup_limit(proc: Path = Path("/proc")) -> int | None:
    """The tightest memory limit of this process's cgroup and its ancestors, as far as they
    are mounted here (v2, or v1's memory controller); None without one."""
    try:
        groups = (proc / "self" / "cgroup").read_text().splitlines()
        mounts = (proc / "self" / "mountinfo").read_text().splitlines()
    except OSError:
        return None
    limits = []
    for line in groups:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "":
            limits += _limits(mounts, "cgroup2", None, path, "memory.max")
        elif "memory" in controllers.split(","):
            limits += _limits(mounts, "cgroup", "memory", path, "memory.limit_in_bytes")
    return min(limits) if limits else None


def _limits(mounts: list[str], fstype: str, option: str | None, path: str,
            name: str) -> list[int]:
    """The limits in `name` files from the cgroup `path` up to its hierarchy's mount."""
    for line in mounts:
        fields = line.split()
        if "-" not in fields:
            continue
        dash = fields.index("-")
        if fields[dash + 1] != fstype or len(fields) < dash + 4:
            continue
        if option is not None and option not in fields[dash + 3].split(","):
            continue
        root, point = fields[3], Path(fields[4])
        rel = path[len(root):] if path.startswith(root) else path
        folder = point / rel.strip("/")
        found = []
        while True:
            value = _read_limit(folder / name)
            if value is not None:
                found.append(value)
            if folder == point or point not in folder.parents:
                return found
            folder = folder.parent
    return []


def _read_limit(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if text == "max":
        return None
    try:
        value = int(text)
    except ValueError:
        return None
    return None if value >= _V1_UNLIMITED else value


def auto_order(read_bytes: int, memory: int | None, shard_share: float = 1.0) -> tuple:
    """`order="auto"` for a local epoch reading `read_bytes` (shards and the companion
    files it reads) with `memory` bytes: ("global", None), or ("shards", window bytes)
    when the bytes are more than half the memory. A window is counted in steps-shard bytes
    (`ShardWindows`), `shard_share` of what it reads."""
    if memory is None or read_bytes <= memory // 2:
        return "global", None
    window = max(MIN_WINDOW_BYTES, int(memory // 8 * shard_share))
    return "shards", window
