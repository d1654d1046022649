//! The cookbook: complete programs for the jobs people do with packs, in the spirit of the
//! `csv` crate's cookbook. Each is also an example in the repository, which the test suite
//! runs: `cargo run --release --example cookbook_select_runs -- PACK`.
//!
//! The programs that need a pack take its folder as their argument; here they read the
//! repository's fixture drop, packed. The ones that make packs start from that fixture drop
//! (`fixtures/raw`: 10 runs, 2,240 rows, depth 6 and depth 7 games) and take an optional
//! folder to work in.
//!
//! - [Pack a drop](#pack-a-drop)
//! - [Select runs with SQL and iterate](#select-runs-with-sql-and-iterate)
//! - [Merge, then shuffle](#merge-then-shuffle)
//! - [Attach embeddings](#attach-embeddings)
//! - [Verify packs in CI](#verify-packs-in-ci)
//! - [Read an old version](#read-an-old-version)
//! - [Split the rows between workers](#split-the-rows-between-workers)
//!
//! # Pack a drop
//!
//! Pack a folder of raw logs into a new pack, keeping the search statistics, with progress
//! reported to an observer of your own (the library itself prints nothing). The same call with
//! `RawPackOptions::default().update(true)` adds a drop's new runs to the pack already there.
//!
//! (`examples/cookbook_pack_drop.rs`)
//!
//! ```
//! use std::path::PathBuf;
//! use std::sync::atomic::{AtomicU64, Ordering};
//!
//! use dataset_packer::progress::{Observer, Progress, Unit};
//! use dataset_packer::{Pack, RawPackOptions, pack_raw};
//!
//! /// Logs each stage and its total to stderr when it ends.
//! #[derive(Default)]
//! struct StageLog {
//!     done: AtomicU64,
//! }
//!
//! impl Progress for StageLog {
//!     fn begin(&self, stage: &str, total: u64, unit: Unit) {
//!         self.done.store(0, Ordering::Relaxed);
//!         eprintln!(
//!             "{stage}: {total} {}",
//!             if unit == Unit::Rows { "rows" } else { "bytes" }
//!         );
//!     }
//!     fn advance(&self, by: u64) {
//!         self.done.fetch_add(by, Ordering::Relaxed);
//!     }
//!     fn end(&self) {
//!         eprintln!("  done: {}", self.done.load(Ordering::Relaxed));
//!     }
//! }
//!
//! fn main() -> dataset_packer::Result<()> {
//!     let mut args = std::env::args_os().skip(1).map(PathBuf::from);
//!     let raw = args
//!         .next()
//!         .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/raw"));
//!     let out = args
//!         .next()
//!         .unwrap_or_else(|| std::env::temp_dir().join("cookbook-pack-drop"));
//!
//!     let options = RawPackOptions::default()
//!         .workers(2)
//!         .search_stats(true)
//!         .overwrite(out.join("metadata.db").exists())
//!         .progress(Observer::new(StageLog::default()));
//!     pack_raw(&raw, &out, &options)?;
//!
//!     let pack = Pack::open(&out)?;
//!     println!(
//!         "packed {} runs, {} rows into {}",
//!         pack.num_runs(),
//!         pack.len(),
//!         out.display()
//!     );
//!     println!("companions: {}", pack.companion_names().join(", "));
//!     Ok(())
//! }
//! ```
//!
//! # Select runs with SQL and iterate
//!
//! Choose runs by what `metadata.db` knows about them (depth, score, tile, source file…) with the
//! SQL that `--where` takes, parameters bound by name, then walk each run's steps in order.
//!
//! (`examples/cookbook_select_runs.rs`)
//!
//! ```
//! use dataset_packer::{Pack, Param};
//!
//! fn main() -> dataset_packer::Result<()> {
//! #    /*
//!     let path = std::env::args_os()
//!         .nth(1)
//!         .expect("usage: cookbook_select_runs PACK");
//! #    */
//! #    let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
//! #    let path = fixture.path();
//!     let pack = Pack::open(&path)?;
//!
//!     let min_score = Param::parse("min_score=2500").expect("a valid parameter");
//!     let ids = pack.select_with("depth = 7 AND max_score > :min_score", &[min_score])?;
//!
//!     let mut rows = 0;
//!     for &id in &ids {
//!         let run = pack.run(id)?;
//!         // How often the search's favourite move was the one played.
//!         let agreed = run
//!             .steps()
//!             .filter(|step| {
//!                 let evs = step.branch_evs();
//!                 let legal = step.legal();
//!                 let best = (0..4)
//!                     .filter(|&m| legal[m])
//!                     .max_by(|&a, &b| evs[a].total_cmp(&evs[b]));
//!                 best == Some(usize::from(step.move_dir()))
//!             })
//!             .count();
//!         println!(
//!             "run {id}: {} steps, best move played {agreed} times",
//!             run.len()
//!         );
//!         rows += run.len();
//!     }
//!     println!("selected {} runs, {rows} rows", ids.len());
//!     Ok(())
//! }
//! ```
//!
//! # Merge, then shuffle
//!
//! Packs made apart (two machines, two weeks) become one with `merge`, runs renumbered in input
//! order; `shuffle` then writes a copy in a random row order for training, in bounded memory, the
//! same bytes for the same seed.
//!
//! (`examples/cookbook_merge_shuffle.rs`)
//!
//! ```
//! use std::path::PathBuf;
//!
//! use dataset_packer::{
//!     MergeOptions, Pack, RawPackOptions, ShuffleOptions, merge, pack_raw, shuffle,
//! };
//!
//! fn main() -> dataset_packer::Result<()> {
//!     let work = std::env::args_os().nth(1).map_or_else(
//!         || std::env::temp_dir().join("cookbook-merge-shuffle"),
//!         PathBuf::from,
//!     );
//!     if work.exists() {
//!         std::fs::remove_dir_all(&work)?;
//!     }
//!     let raw = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/raw");
//!
//!     let mut parts = Vec::new();
//!     for folder in ["d6_10g_v1", "d7_10g_v1"] {
//!         let part = work.join(folder);
//!         pack_raw(raw.join(folder), &part, &RawPackOptions::default())?;
//!         parts.push(part);
//!     }
//!
//!     let merged = work.join("merged");
//!     merge(&parts, &merged, &MergeOptions::default())?;
//!     let shuffled = work.join("shuffled");
//!     shuffle(&merged, &shuffled, &ShuffleOptions::default().seed(2048))?;
//!
//!     for path in [&parts[0], &parts[1], &merged, &shuffled] {
//!         let pack = Pack::open(path)?;
//!         println!(
//!             "{}: {} runs, {} rows{}",
//!             path.file_name().unwrap().to_string_lossy(),
//!             pack.num_runs(),
//!             pack.len(),
//!             if pack.is_shuffled() { ", shuffled" } else { "" }
//!         );
//!     }
//!     Ok(())
//! }
//! ```
//!
//! # Attach embeddings
//!
//! Anything computed per row (a model's embeddings, labels, a second opinion on the move) can
//! travel with the pack as a companion array: one `.npy` row per pack row, in the pack's row
//! order, checksummed and versioned with it, and read back beside the steps.
//!
//! (`examples/cookbook_attach.rs`)
//!
//! ```
//! use std::io::Write;
//! use std::path::{Path, PathBuf};
//!
//! use dataset_packer::{AttachOptions, Pack, RawPackOptions, attach, pack_raw};
//!
//! const DIM: usize = 16;
//!
//! /// Writes `rows` (each `DIM` float32) as a version 1.0 `.npy` file.
//! fn write_npy(path: &Path, rows: &[[f32; DIM]]) -> std::io::Result<()> {
//!     let mut header = format!(
//!         "{{'descr': '<f4', 'fortran_order': False, 'shape': ({}, {DIM}), }}",
//!         rows.len()
//!     );
//!     // Magic (6) + version (2) + length (2) + header + '\n' is a multiple of 64.
//!     header.push_str(&" ".repeat(63 - (10 + header.len()) % 64));
//!     header.push('\n');
//!     let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
//!     out.write_all(b"\x93NUMPY\x01\x00")?;
//!     out.write_all(&(header.len() as u16).to_le_bytes())?;
//!     out.write_all(header.as_bytes())?;
//!     for row in rows {
//!         for v in row {
//!             out.write_all(&v.to_le_bytes())?;
//!         }
//!     }
//!     out.flush()
//! }
//!
//! fn main() -> dataset_packer::Result<()> {
//!     let work = std::env::args_os().nth(1).map_or_else(
//!         || std::env::temp_dir().join("cookbook-attach"),
//!         PathBuf::from,
//!     );
//!     if work.exists() {
//!         std::fs::remove_dir_all(&work)?;
//!     }
//!     std::fs::create_dir_all(&work)?;
//!     let raw = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/raw");
//!     let path = work.join("pack");
//!     pack_raw(&raw, &path, &RawPackOptions::default())?;
//!
//!     // One vector per row, in the pack's row order.
//!     let pack = Pack::open(&path)?;
//!     let vectors: Vec<[f32; DIM]> = pack
//!         .steps()
//!         .map(|step| {
//!             let mut v = [0f32; DIM];
//!             for e in step.exponents() {
//!                 v[usize::from(e).min(DIM - 1)] += 1.0 / 16.0;
//!             }
//!             v
//!         })
//!         .collect();
//!     drop(pack);
//!     let array = work.join("embeddings.npy");
//!     write_npy(&array, &vectors)?;
//!     attach(&path, "embeddings", &[array], &AttachOptions::default())?;
//!
//!     let pack = Pack::open(&path)?;
//!     let embeddings = pack.companion("embeddings")?;
//!     let row = pack.len() / 2;
//!     let v: Vec<f32> = embeddings.values(row)?;
//!     assert_eq!(v, vectors[row as usize]);
//!     println!(
//!         "attached embeddings: {} rows of {:?} {}",
//!         embeddings.len(),
//!         embeddings.shape(),
//!         embeddings.descr()
//!     );
//!     println!("row {row}: empty cells {:.4}, {} values", v[0], v.len());
//!     Ok(())
//! }
//! ```
//!
//! # Verify packs in CI
//!
//! `Pack::verify` reads every byte and checks what `dataset-packer validate` checks. The error's
//! `kind()` tells a damaged pack from an unreadable disk, so a pipeline can exit with a code that
//! says which.
//!
//! (`examples/cookbook_verify.rs`)
//!
//! ```
//! use std::path::Path;
//! use std::process::ExitCode;
//!
//! use dataset_packer::{ErrorKind, Pack};
//!
//! /// Opens the pack and checks every byte of it; its rows when valid.
//! fn check(path: &Path) -> dataset_packer::Result<u64> {
//!     let pack = Pack::open(path)?;
//!     pack.verify()?;
//!     Ok(pack.len())
//! }
//!
//! fn main() -> ExitCode {
//!     let mut worst = 0;
//! #    /*
//!     for path in std::env::args_os().skip(1) {
//! #    */
//! #    let fixture = dataset_packer::pack::doc_support::fixture_pack().unwrap();
//! #    let args = [fixture.path().as_os_str().to_owned()];
//! #    for path in args {
//!         let path = Path::new(&path);
//!         let code = match check(path) {
//!             Ok(rows) => {
//!                 println!("ok: {}: {rows} rows", path.display());
//!                 0
//!             }
//!             Err(e) => {
//!                 println!("{}: {e}", e.kind());
//!                 match e.kind() {
//!                     ErrorKind::NotAPack | ErrorKind::Corrupt | ErrorKind::Unsupported => 1,
//!                     ErrorKind::Io => 2,
//!                     _ => 3,
//!                 }
//!             }
//!         };
//!         worst = worst.max(code);
//!     }
//!     ExitCode::from(worst)
//! }
//! ```
//!
//! # Read an old version
//!
//! Every change to a pack (an update, an attach) is a new version, and the old ones stay readable:
//! tag the version an experiment used, and open the pack at that tag later to get exactly its
//! rows.
//!
//! (`examples/cookbook_old_version.rs`)
//!
//! ```
//! use std::path::{Path, PathBuf};
//!
//! use dataset_packer::{Pack, RawPackOptions, VersionSpec, pack_raw, tag};
//!
//! /// Copies the files of folder `from` into folder `to` (made if missing).
//! fn copy_folder(from: &Path, to: &Path) -> std::io::Result<()> {
//!     std::fs::create_dir_all(to)?;
//!     for entry in std::fs::read_dir(from)? {
//!         let entry = entry?;
//!         std::fs::copy(entry.path(), to.join(entry.file_name()))?;
//!     }
//!     Ok(())
//! }
//!
//! fn main() -> dataset_packer::Result<()> {
//!     let work = std::env::args_os().nth(1).map_or_else(
//!         || std::env::temp_dir().join("cookbook-old-version"),
//!         PathBuf::from,
//!     );
//!     if work.exists() {
//!         std::fs::remove_dir_all(&work)?;
//!     }
//!     let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/raw");
//!     let (drop, path) = (work.join("drop"), work.join("pack"));
//!
//!     copy_folder(&fixture.join("d6_10g_v1"), &drop.join("d6_10g_v1"))?;
//!     pack_raw(&drop, &path, &RawPackOptions::default())?;
//!     tag(&path, "first-drop", &VersionSpec::Latest)?;
//!
//!     copy_folder(&fixture.join("d7_10g_v1"), &drop.join("d7_10g_v1"))?;
//!     pack_raw(&drop, &path, &RawPackOptions::default().update(true))?;
//!
//!     let now = Pack::open(&path)?;
//!     let then = Pack::open_version(&path, &"first-drop".parse()?)?;
//!     for (name, pack) in [("latest", &now), ("first-drop", &then)] {
//!         println!(
//!             "{name}: version {}, {} runs, {} rows",
//!             pack.version(),
//!             pack.num_runs(),
//!             pack.len()
//!         );
//!     }
//!     for v in now.versions()? {
//!         println!("version {}: {} ({} rows)", v.version, v.operation, v.rows);
//!     }
//!     Ok(())
//! }
//! ```
//!
//! # Split the rows between workers
//!
//! A training loader gives each worker a contiguous range of rows; `Pack::steps_in` reads one, and
//! one open `Pack` is shared by all the threads.
//!
//! (`examples/cookbook_worker_ranges.rs`)
//!
//! ```
//! use dataset_packer::Pack;
//!
//! fn main() -> dataset_packer::Result<()> {
//! #    /*
//!     let mut args = std::env::args_os().skip(1);
//!     let path = args
//!         .next()
//!         .expect("usage: cookbook_worker_ranges PACK [WORKERS]");
//!     let workers: u64 = args
//!         .next()
//!         .map_or(Some(4), |w| w.to_str().and_then(|w| w.parse().ok()))
//!         .expect("WORKERS is a number");
//! #    */
//! #    let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
//! #    let path = fixture.path();
//! #    let workers: u64 = 4;
//!     let pack = Pack::open(&path)?;
//!
//!     let len = pack.len();
//!     let counts: Vec<[u64; 4]> = std::thread::scope(|scope| {
//!         let handles: Vec<_> = (0..workers)
//!             .map(|w| {
//!                 let range = w * len / workers..(w + 1) * len / workers;
//!                 let pack = &pack;
//!                 scope.spawn(move || {
//!                     let mut moves = [0u64; 4];
//!                     for step in pack.steps_in(range) {
//!                         moves[usize::from(step.move_dir())] += 1;
//!                     }
//!                     moves
//!                 })
//!             })
//!             .collect();
//!         handles.into_iter().map(|h| h.join().unwrap()).collect()
//!     });
//!
//!     for (w, moves) in counts.iter().enumerate() {
//!         println!(
//!             "worker {w}: up {} down {} left {} right {}",
//!             moves[0], moves[1], moves[2], moves[3]
//!         );
//!     }
//!     let rows: u64 = counts.iter().flatten().sum();
//!     println!("rows: {rows} of {len}");
//!     Ok(())
//! }
//! ```
