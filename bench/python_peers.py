#!/usr/bin/env python3
"""Benchmark of the Python package against its peers on the same rows (issue 23, items 7 and 8).

    bench/run.sh peers                        # makes the venv, the peers' copies, runs all
    python3 bench/python_peers.py [PACK] [--venv target/bench/peers-venv] [--batch 4096]
                                  [--rounds 3] [--budget 8] [--systems ours,mixture,hf,lance,mds]

PACK (default target/bench/pack-4m-1m-shards, packed from the bench corpus when missing, as
bench/python_loader.py does) is read once and written, once, into each peer's own format under
target/bench/peers/ (kept while the pack is unchanged). The columns a trainer takes from a
48-byte row, decoded, are what every peer stores:

- HF datasets: Arrow via `Dataset.from_dict` + `save_to_disk`, read with `load_from_disk` and
  `with_format("numpy")`: exps fixed list of 16 uint8, move int8, evs fixed list of 4 float32
  (illegal moves NaN, as ours), legal fixed list of 4 bool, valuation uint8.
- Lance (pylance): `lance.write_dataset` of the same pyarrow table, read with `take`.
- MosaicML Streaming: MDS shards written with `MDSWriter` (local only, no remote, no
  compression): exps `ndarray:uint8:16`, move `int8`, evs `ndarray:float32:4`, legal
  `ndarray:uint8:4` (MDS has no bool array; 0/1, turned to bool on read), valuation `uint8`;
  read with `StreamingDataset(local=…)`.
- ours: the pack as it is (48-byte rows), decoded per batch into all its keys (exps, move, evs,
  legal, valuation, board_eval, run_id, step_index, max_rank, seed, row).

Each system is measured in a fresh subprocess (its peak RSS is `ru_maxrss` of that process;
DataLoader workers' peak is given apart), after reading its files once (page cache warm), in
rows/s, best of `--rounds`:

- random: batches of `--batch` uniform random indices (with replacement), as NumPy arrays.
  ours `Pack.gather`; HF `ds[indices]`; Lance `take(indices)` to NumPy; MDS has no batch
  access, so `ds[i]` per row and a stack.
- epoch: one shuffled epoch in batches of `--batch`. ours `Pack.batches(shuffle=True)`; HF
  `ds.shuffle(seed).iter(batch_size)`; Lance `take` of consecutive slices of a permutation;
  MDS `StreamingDataset(shuffle=True)` iterated and stacked per batch.
- loader: a torch DataLoader with num_workers=2 yielding batches of `--batch` tensors. ours
  `PackLoader(PackDataset(…, shuffle=True))`, all keys and `columns=` the five above; HF
  `with_format("torch")` behind a `BatchSampler(RandomSampler)` with batch_size=None (one
  `ds[indices]` per batch: per-row getitem would be far slower); Lance the same over `take`;
  MDS `StreamingDataset(shuffle=True)` (an IterableDataset) with `batch_size`. Timed from the
  first batch (worker start-up apart).
- mixture (ours): `Mixture` of the pack's two halves (by run) against the single pack, for
  shuffled epoch batches in process and through `PackLoader` (`columns=`), alternating in
  each round; the goal is ≤ 10% slower.

A measurement stops after `--budget` seconds (at least 3 batches), so a slow system reads only
part of an epoch; the table says how much. The load average is printed with every system, and
a second table gives every system's CPU milliseconds per batch (a DataLoader's: its main
process + its workers): other builds on the machine slow the wall time, far less the CPU per
batch, from which the DataLoader's share of in-process speed on 2 idle cores is bounded.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import venv
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_PACK = REPO / "target/bench/pack-4m-1m-shards"
CACHE = REPO / "target/bench/peers"
COLUMNS = ("exps", "move", "evs", "legal", "valuation")
SYSTEMS = ("ours", "mixture", "hf", "lance", "mds")
CPU_TORCH = "https://download.pytorch.org/whl/cpu"
# Peers' warnings about read-only arrays given to torch (nothing writes them) and MDS's shared
# memory; here so that forkserver DataLoader workers, which import this file, take them too.
warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
warnings.filterwarnings("ignore", message="resource_tracker")
warnings.filterwarnings("ignore", message="lance is not fork-safe")


# ------------------------------------------------------------------ the venv


def ensure_venv(path: Path) -> Path:
    """The bench venv (made once from bench/peers-requirements.txt, our package installed from
    ./python): the peers never enter CI or the project's own environments."""
    python = path / "bin/python"
    stamp = path / "installed-requirements.txt"
    wanted = (REPO / "bench/peers-requirements.txt").read_text()
    if not python.exists() or not stamp.exists() or stamp.read_text() != wanted:
        print(f"making {path} from bench/peers-requirements.txt…", file=sys.stderr)
        venv.create(path, with_pip=True, clear=True)
        pip = [str(python), "-m", "pip", "install", "--quiet"]
        # The CPU wheel of torch: PyPI's default on Linux is the multi-GB CUDA build.
        subprocess.run(pip + ["--extra-index-url", CPU_TORCH, "-r",
                              str(REPO / "bench/peers-requirements.txt")], check=True)
        stamp.write_text(wanted)
    # Our package as it is now, built from a copy so that the checkout gets no build/ or
    # *.egg-info.
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "python"
        shutil.copytree(REPO / "python", copy,
                        ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps",
                        "--force-reinstall", str(copy)], check=True)
    return python


# ------------------------------------------------------------------ the peers' copies


def import_ours():
    try:
        import dataset_packer
    except ImportError:  # run from a checkout without installing the package
        sys.path.insert(0, str(REPO / "python"))
        import dataset_packer
    return dataset_packer


def ensure_pack(path: Path) -> None:
    sys.path.insert(0, str(REPO / "bench"))
    from python_loader import ensure_pack as pack_corpus
    pack_corpus(path)


def pack_key(pack_path: Path) -> str:
    """What the cached copies were made from: the shards' names, sizes and times."""
    parts = [str(pack_path.resolve())]
    for p in sorted(pack_path.glob("*.npy")):
        st = p.stat()
        parts.append(f"{p.name}:{st.st_size}:{st.st_mtime_ns}")
    return "\n".join(parts)


def arrow_table(pack):
    """The five columns of every row, in pack order, as one pyarrow table."""
    import numpy as np
    import pyarrow as pa

    chunks = []
    for b in pack.batches(1 << 20, shuffle=False):
        n = len(b["move"])
        chunks.append(pa.table({
            "exps": pa.FixedSizeListArray.from_arrays(pa.array(b["exps"].reshape(-1)), 16),
            "move": pa.array(b["move"].astype(np.int8)),
            "evs": pa.FixedSizeListArray.from_arrays(pa.array(b["evs"].reshape(-1)), 4),
            "legal": pa.FixedSizeListArray.from_arrays(pa.array(b["legal"].reshape(-1)), 4),
            "valuation": pa.array(b["valuation"]),
        }))
        assert chunks[-1].num_rows == n
    return pa.concat_tables(chunks).combine_chunks()


def write_hf(table, out: Path) -> None:
    import datasets
    ds = datasets.Dataset.from_dict({name: table.column(name) for name in COLUMNS})
    ds.save_to_disk(str(out))


def write_lance(table, out: Path) -> None:
    import lance
    lance.write_dataset(table, str(out))


def write_mds(pack, out: Path) -> None:
    import numpy as np
    from streaming import MDSWriter

    columns = {"exps": "ndarray:uint8:16", "move": "int8", "evs": "ndarray:float32:4",
               "legal": "ndarray:uint8:4", "valuation": "uint8"}
    with MDSWriter(out=str(out), columns=columns, size_limit=1 << 26) as writer:
        for b in pack.batches(1 << 20, shuffle=False):
            legal = b["legal"].astype(np.uint8)
            move = b["move"].astype(np.int8)
            for i in range(len(move)):
                writer.write({"exps": b["exps"][i], "move": move[i], "evs": b["evs"][i],
                              "legal": legal[i], "valuation": b["valuation"][i]})


def ensure_copies(pack_path: Path, systems, cache: Path) -> dict:
    """Each peer's copy of the pack under `cache` (made when missing or stale)."""
    dp = import_ours()
    key = pack_key(pack_path)
    paths = {"hf": cache / "hf", "lance": cache / "lance", "mds": cache / "mds"}
    table = None
    for system, out in paths.items():
        if system not in systems:
            continue
        stamp = out.with_suffix(".made-from")
        if stamp.exists() and stamp.read_text() == key and out.exists():
            continue
        shutil.rmtree(out, ignore_errors=True)
        out.parent.mkdir(parents=True, exist_ok=True)
        print(f"writing {out} (once)…", file=sys.stderr, flush=True)
        start = time.perf_counter()
        pack = dp.Pack(pack_path)
        if system == "mds":
            write_mds(pack, out)
        else:
            if table is None:
                table = arrow_table(pack)
            (write_hf if system == "hf" else write_lance)(table, out)
        stamp.write_text(key)
        print(f"wrote {out} in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    return {k: str(v) for k, v in paths.items()}


# ------------------------------------------------------------------ measuring


def warm(folder: Path) -> int:
    total = 0
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            with open(p, "rb") as f:
                while chunk := f.read(1 << 24):
                    total += len(chunk)
    return total


def rate(batches, budget: float, rounds: int, make=None, cpu=None) -> dict:
    """Best rows/s over `rounds` of draining `batches()` (a fresh iterator of row counts per
    round) for at most `budget` seconds each; `make` is excluded from the time (a loader's
    start-up: timing begins at its first batch). With it, the CPU milliseconds per batch of
    the best round: this process's, and `cpu()`'s (cumulative seconds of other processes,
    a loader's workers), which other load on the machine changes far less than the wall
    time."""
    best, rows_done, per_batch = 0.0, 0, [0.0, 0.0]
    for _ in range(rounds):
        it = batches()
        if make:
            next(it)
        rows, count = 0, 0
        used = (time.process_time(), cpu() if cpu else 0.0)
        start = time.perf_counter()
        for n in it:
            rows += n
            count += 1
            if time.perf_counter() - start > budget and count >= 3:
                break
        seconds = time.perf_counter() - start
        used = (time.process_time() - used[0], (cpu() if cpu else 0.0) - used[1])
        if rows and rows / seconds > best:
            best, rows_done = rows / seconds, rows
            per_batch = [1e3 * u / count for u in used]
    return {"rows_per_s": best, "rows": rows_done, "cpu_ms_per_batch": per_batch}


def process_cpu(pids) -> float:
    """User + system CPU seconds of these processes so far (/proc/PID/stat)."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def random_indices(n: int, batch: int, seed: int):
    import numpy as np
    rng = np.random.default_rng(seed)
    while True:
        yield rng.integers(0, n, batch)


def measure_ours(args, paths) -> dict:
    dp = import_ours()
    pack = dp.Pack(args.pack)
    warm(Path(args.pack))
    n, B = len(pack), args.batch
    out = {"rows": n}
    out["random"] = rate(lambda: (len(pack.gather(i)["move"])
                                  for i in random_indices(n, B, 0)), args.budget, args.rounds)
    out["epoch"] = rate(lambda: (len(b["move"]) for b in pack.batches(B, shuffle=True, seed=1)),
                        args.budget, args.rounds)
    out["loader"] = loader_ours(pack, args, None)
    out["loader_columns"] = loader_ours(pack, args, list(COLUMNS))
    return out


def loader_ours(source, args, columns) -> dict:
    from dataset_packer.torch import PackDataset, PackLoader
    data = PackDataset(source, args.batch, shuffle=True, seed=2, columns=columns)
    loader = PackLoader(data, num_workers=2, persistent_workers=True)
    epoch = [0]

    def run():
        data.set_epoch(epoch[0])
        epoch[0] += 1
        return (len(b["move"]) for b in loader)
    return rate(run, args.budget, args.rounds, make=True, cpu=workers_cpu(loader))


def workers_cpu(loader):
    """The CPU seconds so far of a DataLoader's persistent workers (those of its iterator,
    started by the first batch), as `rate` asks for them."""
    return lambda: process_cpu(w.pid for w in loader._iterator._workers)


def measure_mixture(args, paths) -> dict:
    """Mixture of the pack's two halves (by run) against the single pack, alternating in each
    round so that both see the same load: the whole epoch in process, and the share of it
    that one DataLoader worker of one rank reads (rank 1 of 2, worker 0 of 2: its batches
    are not consecutive positions). Each keeps its best round, and the CPU per batch of
    every round (`cpu_rounds`)."""
    dp = import_ours()
    pack = dp.Pack(args.pack)
    warm(Path(args.pack))
    ids, _ = dp._data.of(pack).runs()
    half = len(ids) // 2
    mix = dp.Mixture([pack.select(runs=ids[:half]), pack.select(runs=ids[half:])])
    B = args.batch
    share = dict(rank=1, world_size=2, worker=0, num_workers=2)
    runs = {
        "single_epoch": lambda: (len(b["move"]) for b in pack.batches(B, shuffle=True, seed=1)),
        "mixture_epoch": lambda: (len(b["move"]) for b in mix.batches(B, shuffle=True, seed=1)),
        "single_share": lambda: (len(b["move"]) for b in pack.batches(B, seed=1, **share)),
        "mixture_share": lambda: (len(b["move"]) for b in mix.batches(B, seed=1, **share)),
    }
    out = {"rows": len(mix), **{name: {"rows_per_s": 0.0, "rows": 0} for name in runs}}
    rounds: dict = {name: [] for name in runs}
    for _ in range(args.rounds):
        for name, fn in runs.items():
            r = rate(fn, args.budget, 1)
            rounds[name].append(r["cpu_ms_per_batch"][0])
            if r["rows_per_s"] > out[name]["rows_per_s"]:
                out[name] = r
    for name in runs:
        out[name]["cpu_rounds"] = rounds[name]
    out["single_loader"] = loader_ours(pack, args, list(COLUMNS))
    out["mixture_loader"] = loader_ours(mix, args, list(COLUMNS))
    return out


def stacked(rows, batch: int):
    """Per-row dicts (an MDS stream) stacked into NumPy batches of `batch` rows; yields row
    counts."""
    import numpy as np
    pending = []
    for row in rows:
        pending.append(row)
        if len(pending) == batch:
            yield len(stack(pending, np)["move"])
            pending = []


def stack(rows: list, np) -> dict:
    out = {name: np.stack([r[name] for r in rows]) for name in COLUMNS}
    out["legal"] = out["legal"].astype(bool)
    return out


def lance_numpy(table) -> dict:
    """A pyarrow table of the five columns as NumPy arrays (fixed lists as 2-D)."""
    out = {}
    for name in COLUMNS:
        col = table.column(name).combine_chunks()
        if name in ("exps", "evs", "legal"):
            width = col.type.list_size
            out[name] = col.flatten().to_numpy(zero_copy_only=False).reshape(-1, width)
        else:
            out[name] = col.to_numpy(zero_copy_only=False)
    return out


class BatchTake:
    """A map-style dataset whose item is a whole batch (`BatchSampler` gives it the indices):
    HF `ds[indices]` with the torch format, or Lance `take` to tensors. Opened lazily in each
    DataLoader worker."""

    def __init__(self, system: str, path: str):
        self.system, self.path, self.ds = system, path, None

    def __getitem__(self, indices):
        import numpy as np
        import torch
        if self.ds is None:
            if self.system == "hf":
                import datasets
                self.ds = datasets.load_from_disk(self.path).with_format("torch")
            else:
                import lance
                self.ds = lance.dataset(self.path)
        if self.system == "hf":
            return self.ds[indices]
        batch = lance_numpy(self.ds.take(np.asarray(indices), columns=list(COLUMNS)))
        return {k: torch.from_numpy(v) for k, v in batch.items()}


def loader_take(system: str, path: str, n: int, args) -> dict:
    from torch.utils.data import BatchSampler, DataLoader, RandomSampler
    sampler = BatchSampler(RandomSampler(range(n)), args.batch, drop_last=False)
    # Lance is not fork-safe (it says so when forked): its workers are started fresh.
    context = "forkserver" if system == "lance" else None
    loader = DataLoader(BatchTake(system, path), sampler=sampler, batch_size=None,
                        num_workers=2, persistent_workers=True, multiprocessing_context=context)
    return rate(lambda: (len(b["move"]) for b in loader), args.budget, args.rounds, make=True,
                cpu=workers_cpu(loader))


def measure_hf(args, paths) -> dict:
    import datasets
    import numpy as np
    ds = datasets.load_from_disk(paths["hf"]).with_format("numpy")
    warm(Path(paths["hf"]))
    n, B = len(ds), args.batch
    first = ds[np.arange(3)]
    assert first["exps"].shape == (3, 16) and first["legal"].dtype == bool, first
    out = {"rows": n}
    out["random"] = rate(lambda: (len(ds[i]["move"]) for i in random_indices(n, B, 0)),
                         args.budget, args.rounds)
    out["epoch"] = rate(lambda: (len(b["move"]) for b in
                                 ds.shuffle(seed=1).iter(batch_size=B)), args.budget, args.rounds)
    out["loader"] = loader_take("hf", paths["hf"], n, args)
    return out


def measure_lance(args, paths) -> dict:
    import lance
    import numpy as np
    ds = lance.dataset(paths["lance"])
    warm(Path(paths["lance"]))
    n, B = ds.count_rows(), args.batch
    take = lambda idx: lance_numpy(ds.take(idx, columns=list(COLUMNS)))  # noqa: E731
    first = take(np.arange(3))
    assert first["exps"].shape == (3, 16) and first["legal"].dtype == bool, first

    def epoch():
        perm = np.random.default_rng(1).permutation(n)
        return (len(take(perm[a:a + B])["move"]) for a in range(0, n, B))
    out = {"rows": n}
    out["random"] = rate(lambda: (len(take(i)["move"]) for i in random_indices(n, B, 0)),
                         args.budget, args.rounds)
    out["epoch"] = rate(epoch, args.budget, args.rounds)
    out["loader"] = loader_take("lance", paths["lance"], n, args)
    return out


def measure_mds(args, paths) -> dict:
    import numpy as np
    from streaming import StreamingDataset
    from streaming.base.util import clean_stale_shared_memory
    from torch.utils.data import DataLoader
    clean_stale_shared_memory()
    warm(Path(paths["mds"]))
    B = args.batch
    ds = StreamingDataset(local=paths["mds"], shuffle=True, shuffle_seed=1, batch_size=B)
    n = len(ds)
    out = {"rows": n}
    out["random"] = rate(lambda: (len(stack([ds[int(j)] for j in i], np)["move"])
                                  for i in random_indices(n, B, 0)), args.budget, args.rounds)
    out["epoch"] = rate(lambda: stacked(iter(ds), B), args.budget, args.rounds)
    del ds
    clean_stale_shared_memory()
    data = StreamingDataset(local=paths["mds"], shuffle=True, shuffle_seed=2, batch_size=B)
    loader = DataLoader(data, batch_size=B, num_workers=2, persistent_workers=True)
    out["loader"] = rate(lambda: (len(b["move"]) for b in loader), args.budget, args.rounds,
                         make=True, cpu=workers_cpu(loader))
    return out


MEASURE = {"ours": measure_ours, "mixture": measure_mixture, "hf": measure_hf,
           "lance": measure_lance, "mds": measure_mds}


def vm_hwm_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def measure(args) -> int:
    paths = json.loads(args.paths)
    load = os.getloadavg()[0]
    out = MEASURE[args.measure](args, paths)
    out["load"] = [load, os.getloadavg()[0]]
    # VmHWM, not ru_maxrss: the latter survives exec, so it would hold the parent's peak.
    out["rss_mib"] = vm_hwm_kib() / 1024
    out["children_rss_mib"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(json.dumps(out), flush=True)
    # Loader workers and peers' threads may linger: this process is done.
    os._exit(0)


# ------------------------------------------------------------------ the report


def mrows(r) -> str:
    if not r or not r["rows_per_s"]:
        return "–"
    m = r["rows_per_s"] / 1e6
    return f"{m:.2f}" if m >= 1 else f"{m:.3f}"


def cpu_ms(r) -> str:
    if not r or not r["rows_per_s"]:
        return "–"
    main, others = r["cpu_ms_per_batch"]
    return f"{main:.3g}" if not others else f"{main:.3g} + {others:.3g}"


def part_of(r, n: int) -> str:
    return "" if not r or r["rows"] >= n else f" ({100 * r['rows'] / n:.0f}%)"


def report(results: dict, args) -> None:
    B = args.batch
    print(f"\nM rows/s, batches of {B}, best of {args.rounds} ({os.cpu_count()} CPUs); "
          f"(x%): share of the epoch read in the {args.budget:g} s budget")
    print(f"| system | random batches | shuffled epoch | DataLoader, 2 workers | peak RSS MiB "
          f"(workers) | load avg |")
    print("|---|---:|---:|---:|---:|---|")
    names = {"ours": "dataset_packer", "hf": "HF datasets (Arrow)", "lance": "Lance",
             "mds": "MosaicML Streaming (MDS)"}
    for system, r in results.items():
        if system == "mixture":
            continue
        n = r["rows"]
        loader = mrows(r.get("loader"))
        if system == "ours":
            loader += f"; columns=: {mrows(r.get('loader_columns'))}"
        print(f"| {names[system]} | {mrows(r['random'])} | {mrows(r['epoch'])}"
              f"{part_of(r['epoch'], n)} | {loader} | {r['rss_mib']:.0f} "
              f"({r['children_rss_mib']:.0f}) | {r['load'][0]:.2f} → {r['load'][1]:.2f} |")
    print(f"\nCPU ms per batch of {B} rows (the best round's; the DataLoader's: main process + "
          f"workers), which other load on the machine changes far less than the rows/s:")
    print("| system | random batches | shuffled epoch | DataLoader, 2 workers |")
    print("|---|---:|---:|---:|")
    for system, r in results.items():
        if system == "mixture":
            continue
        loader = cpu_ms(r.get("loader"))
        if system == "ours":
            loader += f"; columns=: {cpu_ms(r.get('loader_columns'))}"
        print(f"| {names[system]} | {cpu_ms(r['random'])} | {cpu_ms(r['epoch'])} | {loader} |")
    mix = results.get("mixture")
    if mix:
        for what in ("epoch", "share", "loader"):
            single, mixed = mix.get(f"single_{what}"), mix.get(f"mixture_{what}")
            if not single or not mixed:
                continue  # a result of the script before the share was measured
            cost = single["rows_per_s"] / mixed["rows_per_s"] - 1 if mixed["rows_per_s"] else 0
            cpu_single, cpu_mixed = (sum(r["cpu_ms_per_batch"]) for r in (single, mixed))
            paired = ""
            if "cpu_rounds" in single:
                # Round by round (the two ran one after the other): the median of the ratios.
                ratios = sorted(m / s for s, m in zip(single["cpu_rounds"], mixed["cpu_rounds"]))
                median = ratios[len(ratios) // 2]
                paired = f" (median of {len(ratios)} rounds: {100 * (median - 1):+.1f}%)"
            print(f"mixture of two halves, {what}: {mrows(mixed)} M rows/s against the single "
                  f"pack's {mrows(single)}: {100 * cost:+.1f}% time per row (goal ≤ +10%); "
                  f"CPU per batch (all processes) {cpu_mixed:.3f} against {cpu_single:.3f} ms: "
                  f"{100 * (cpu_mixed / cpu_single - 1):+.1f}%{paired}; "
                  f"load {mix['load'][0]:.2f} → {mix['load'][1]:.2f}")
    ours = results.get("ours")
    if ours and ours.get("loader_columns"):
        in_process = ours["epoch"]["rows_per_s"]
        print(f"ours through the DataLoader (columns=) / in-process epoch batches: "
              f"{ours['loader_columns']['rows_per_s'] / in_process:.2f} (goal ≥ 0.8 where the "
              f"cores allow); all keys: {ours['loader']['rows_per_s'] / in_process:.2f}")
        alone = ours["epoch"]["cpu_ms_per_batch"][0]
        for what in ("loader", "loader_columns"):
            main, workers = ours[what]["cpu_ms_per_batch"]
            # On 2 idle cores: the processes' CPU shared by both cores, the main one alone
            # on one of them at most.
            bound = alone * min(2 / (main + workers), 1 / main) if main else 0
            print(f"CPU ms per batch, {what}: main {main:.3f} + workers {workers:.3f} against "
                  f"{alone:.3f} in process: at most {bound:.2f} of in-process on 2 idle cores")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pack", type=Path, nargs="?", default=DEFAULT_PACK)
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--budget", type=float, default=8.0,
                    help="seconds per measurement at most (at least 3 batches)")
    ap.add_argument("--systems", default=",".join(SYSTEMS),
                    help=f"comma-separated, of {','.join(SYSTEMS)}")
    ap.add_argument("--cache", type=Path, default=CACHE,
                    help="where the peers' copies of the pack are kept (default %(default)s)")
    ap.add_argument("--venv", type=Path,
                    help="make this venv from bench/peers-requirements.txt and run in it")
    ap.add_argument("--measure", choices=SYSTEMS, help=argparse.SUPPRESS)
    ap.add_argument("--paths", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:
        return measure(args)
    if args.venv is not None and Path(sys.prefix).resolve() != args.venv.resolve():
        python = ensure_venv(args.venv)
        os.execv(python, [str(python), __file__, *sys.argv[1:]])
    systems = [s for s in args.systems.split(",") if s]
    unknown = set(systems) - set(SYSTEMS)
    if unknown:
        ap.error(f"unknown systems {sorted(unknown)}: choose from {','.join(SYSTEMS)}")
    ensure_pack(args.pack)
    paths = ensure_copies(args.pack, systems, args.cache)
    print(f"pack {args.pack}; {os.cpu_count()} CPUs; python {sys.executable}", flush=True)
    results = {}
    for system in systems:
        cmd = [sys.executable, __file__, str(args.pack), "--measure", system,
               "--paths", json.dumps(paths), "--batch", str(args.batch),
               "--rounds", str(args.rounds), "--budget", str(args.budget)]
        done = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=True)
        results[system] = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"{system}: {json.dumps(results[system])}", file=sys.stderr, flush=True)
    report(results, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
