//! A pack directory as the tool owns it: which files belong to a pack, the lock that keeps two
//! writers apart, the staging folder new packs are built in, and the publish step that swaps a
//! finished pack in.
//!
//! Publish protocol (crash-safe, roll-forward): everything is written and fsynced in
//! `.dataset-packer-staging/`, then a `.complete` manifest naming the new files is written.
//! `metadata.db` is the commit point: the old one is moved aside first (from then on the folder
//! holds no pack a loader would accept), old pack files follow it into `staging/.old/`, new
//! shards and `valuation_types.json` move in, and the new `metadata.db` moves in last. If the
//! process dies mid-way, the next writer of the folder finds the complete manifest and finishes
//! the same steps (they are idempotent); an incomplete staging folder is simply deleted.

use std::fs::{self, File};
use std::path::{Path, PathBuf};

use crate::error::{Context, Result, ensure, err, fail};

use crate::format::{metadata, valuation};
use crate::interrupt::{self, OnInterrupt};
use crate::pack::files::{COMPLETE, STAGING, is_pack_file, is_shard_name};

/// The work folder of a shuffle writing into this folder (bucket files, progress).
pub const SHUFFLE_WORK: &str = ".dataset-packer-shuffle";
const OLD: &str = ".old";
/// Manifest lines naming a file the publish removes start with this.
const RETIRED: &str = "-";

/// fsyncs one file.
pub fn sync_file(path: &Path) -> Result<()> {
    File::open(path)
        .and_then(|f| f.sync_all())
        .with_context(|| format!("syncing {}", path.display()))
}

/// Writes (and syncs) `valuation_types.json` into a staging folder.
pub fn write_valuations(dir: &Path, table: &valuation::ValuationTable) -> Result<()> {
    let path = dir.join(valuation::FILE_NAME);
    fs::write(&path, table.to_json()).with_context(|| format!("writing {}", path.display()))?;
    sync_file(&path)
}

/// Names in `dir` that look like shards to a loader's glob but are not pack shards.
pub fn stray_step_files(dir: &Path) -> Result<Vec<String>> {
    let mut stray = Vec::new();
    for entry in fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if name.starts_with("steps") && name.ends_with(".npy") && !is_shard_name(&name) {
            stray.push(name);
        }
    }
    stray.sort();
    Ok(stray)
}

fn pack_files_in(dir: &Path) -> Result<Vec<String>> {
    let mut names = Vec::new();
    for entry in fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if is_pack_file(&name) {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

/// What interrupted runs left in a pack folder: a staging folder of a writer killed before it
/// published, or a shuffle's work folder; each with its size in bytes, and a sentence saying
/// what happens to it. Empty when there is none.
pub fn leftovers(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for (name, what) in [
        (
            STAGING,
            "an unfinished write (one under way now, or one killed before it published); the next pack, merge, shuffle or export into this folder removes it, or finishes its publish if it was complete",
        ),
        (
            SHUFFLE_WORK,
            "an interrupted shuffle's bucket files; `shuffle --resume` continues it, a shuffle without --resume removes it",
        ),
    ] {
        let path = dir.join(name);
        if path.is_dir() {
            out.push(format!(
                "{} ({:.1} MB): {what}",
                path.display(),
                tree_bytes(&path) as f64 / 1e6
            ));
        }
    }
    out
}

/// Bytes of the files under `dir`.
fn tree_bytes(dir: &Path) -> u64 {
    let Ok(entries) = fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(|e| e.ok())
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => tree_bytes(&e.path()),
            _ => e.metadata().map_or(0, |m| m.len()),
        })
        .sum()
}

/// The output directory, locked (flock on the folder itself) for this process until dropped.
/// A folder this process created is removed again if nothing was published into it.
pub struct OutputDir {
    dir: PathBuf,
    _lock: File,
    created: bool,
    published: bool,
    keep_staging: bool,
    /// Companion files of the pack being replaced that its `metadata.db` records as its own:
    /// the publish removes those the new pack does not write again.
    replaced_companions: Vec<String>,
    /// What an interrupt (Ctrl-C, SIGTERM) removes: the staging folder, then the output
    /// folder if this run created it and it is empty.
    _on_interrupt: Vec<interrupt::Registered>,
}

impl Drop for OutputDir {
    fn drop(&mut self) {
        if !self.published && !self.keep_staging {
            let _ = fs::remove_dir_all(self.staging_path());
            if self.created {
                let _ = fs::remove_dir(&self.dir);
            }
        }
    }
}

impl OutputDir {
    /// Creates/locks `dir`, finishes or cleans what a killed run left behind, and refuses an
    /// existing pack unless `overwrite`. The companion families the existing pack records
    /// (in its `companions` table, as `--search-stats` and `attach` do) are its own and are
    /// replaced with it; companion files it does not record are another tool's, and refused.
    pub fn open(dir: &Path, overwrite: bool) -> Result<OutputDir> {
        OutputDir::open_with(dir, overwrite, false)
    }

    /// Like [`OutputDir::open`]; with `resume`, an unfinished staging folder is kept for the
    /// caller to continue from instead of being deleted.
    pub fn open_with(dir: &Path, overwrite: bool, resume: bool) -> Result<OutputDir> {
        let mut out = OutputDir::lock_and_recover(dir, resume)?;
        let recorded = recorded_companions(dir);
        let (own, foreign): (Vec<String>, Vec<String>) = crate::pack::files::companion_files(dir)?
            .into_iter()
            .partition(|name| recorded.contains(name));
        if !foreign.is_empty() {
            fail!(
                Refused,
                "{} holds {} next to the pack: arrays aligned row by row with it (companions) that its metadata.db does not record, which a new pack there would orphan; move {} away, or `dataset-packer detach` the family, first",
                dir.display(),
                list_names(&foreign),
                if foreign.len() == 1 { "it" } else { "them" }
            );
        }
        let existing = pack_files_in(dir)?;
        if !existing.is_empty() && !overwrite {
            let mut files = existing;
            files.extend(own);
            return Err(err!(
                Refused,
                "{} already holds a pack ({}); it is replaced only when overwriting is asked for",
                dir.display(),
                list_names(&files)
            )
            .with_option("overwrite"));
        }
        if !existing.is_empty() {
            interrupt::replacing();
        }
        out.replaced_companions = own;
        Ok(out)
    }

    /// Creates/locks `dir`, finishes or cleans what a killed run left behind, and refuses
    /// stray shard look-alikes.
    fn lock_and_recover(dir: &Path, resume: bool) -> Result<OutputDir> {
        crate::pack::files::refuse_url(dir)?;
        let created = !dir.exists();
        fs::create_dir_all(dir)
            .with_context(|| format!("creating output folder {}", dir.display()))?;
        let lock = File::open(dir).with_context(|| format!("opening {}", dir.display()))?;
        if lock.try_lock().is_err() {
            fail!(
                Refused,
                "another dataset-packer process is writing to {}",
                dir.display()
            );
        }
        let mut on_interrupt = Vec::new();
        if created {
            on_interrupt.push(interrupt::register(dir, OnInterrupt::RemoveIfEmpty));
        }
        on_interrupt.push(interrupt::register(&dir.join(STAGING), OnInterrupt::Remove));
        let out = OutputDir {
            dir: dir.to_path_buf(),
            _lock: lock,
            created,
            published: false,
            keep_staging: false,
            replaced_companions: Vec::new(),
            _on_interrupt: on_interrupt,
        };
        out.recover(resume)?;
        let stray = stray_step_files(dir)?;
        if !stray.is_empty() {
            fail!(
                Refused,
                "{} holds {} that loaders would take for pack shards but this tool did not write; move {} away first",
                dir.display(),
                stray.join(", "),
                if stray.len() == 1 { "it" } else { "them" }
            );
        }
        Ok(out)
    }

    /// Locks the pack in `dir` and recovers from a killed run, for a command that changes the
    /// pack in place (`attach`, `detach`); fails when `dir` holds no pack.
    pub fn open_existing(dir: &Path) -> Result<OutputDir> {
        crate::pack::shards::open_metadata(dir)?;
        let out = OutputDir::lock_and_recover(dir, false)?;
        if !dir.join(metadata::FILE_NAME).exists() {
            fail!(
                NotAPack,
                "{} is not a pack: it has no {}",
                dir.display(),
                metadata::FILE_NAME
            );
        }
        interrupt::replacing();
        Ok(out)
    }

    /// The pack files in place (shards, `valuation_types.json`, `metadata.db`).
    pub fn pack_files(&self) -> Result<Vec<String>> {
        pack_files_in(&self.dir)
    }

    /// Creates/locks `dir` and recovers from a killed run like [`OutputDir::open`], for a
    /// command that extends the pack in it (`pack --update`); says whether it holds a pack.
    /// Pack files without a `metadata.db` (not a pack a loader would accept) are refused.
    pub fn open_for_update(dir: &Path) -> Result<(OutputDir, bool)> {
        let out = OutputDir::lock_and_recover(dir, false)?;
        let existing = pack_files_in(dir)?;
        let has_pack = existing.iter().any(|n| n == metadata::FILE_NAME);
        if has_pack {
            interrupt::replacing();
        }
        if !has_pack && !existing.is_empty() {
            return Err(err!(
                Refused,
                "{} holds pack files ({}) but no metadata.db, so no pack to update; replace them by packing with overwriting asked for",
                dir.display(),
                existing.join(", ")
            )
            .with_option("overwrite"));
        }
        Ok((out, has_pack))
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    fn staging_path(&self) -> PathBuf {
        self.dir.join(STAGING)
    }

    /// Deals with a staging folder left by a killed run: roll a complete one forward, delete
    /// an incomplete one (unless `keep_incomplete`, for commands that resume their work).
    fn recover(&self, keep_incomplete: bool) -> Result<()> {
        let staging = self.staging_path();
        if !staging.exists() {
            return Ok(());
        }
        if staging.join(COMPLETE).exists() {
            log::warn!(
                "finishing the interrupted publish of a complete pack in {}",
                self.dir.display()
            );
            self.complete_publish(&staging)
        } else if keep_incomplete {
            Ok(())
        } else {
            log::info!("removing stale staging folder {}", staging.display());
            fs::remove_dir_all(&staging).with_context(|| format!("removing {}", staging.display()))
        }
    }

    /// For resumable commands: keep the staging folder when this process fails, so a later
    /// run can continue from it.
    pub fn keep_staging_on_failure(&mut self) {
        self.keep_staging = true;
        self._on_interrupt.pop();
        self._on_interrupt.push(interrupt::register(
            &self.staging_path(),
            OnInterrupt::Keep("the output written so far; `--resume` continues from it".into()),
        ));
    }

    /// Whether a staging folder is there (an interrupted run's, kept for `--resume`).
    pub fn has_staging(&self) -> bool {
        self.staging_path().exists()
    }

    /// The staging folder as a previous, interrupted run left it (created empty if missing).
    pub fn resume_staging(&self) -> Result<PathBuf> {
        let staging = self.staging_path();
        fs::create_dir_all(&staging).with_context(|| format!("creating {}", staging.display()))?;
        Ok(staging)
    }

    /// A fresh, empty staging folder inside the output directory.
    pub fn begin_staging(&self) -> Result<PathBuf> {
        let staging = self.staging_path();
        if staging.exists() {
            fs::remove_dir_all(&staging)?;
        }
        fs::create_dir(&staging).with_context(|| format!("creating {}", staging.display()))?;
        Ok(staging)
    }

    /// Publishes the pack in the staging folder together with the files `kept` of the pack
    /// already in place (an extended pack: they are part of it and stay untouched); every
    /// other old pack file is replaced or removed.
    pub fn publish_keeping(self, kept: &[String]) -> Result<()> {
        self.publish_with(kept, &[])
    }

    /// Like [`OutputDir::publish_keeping`], and the files `retired` of the old pack (a
    /// companion family detached) are removed with the old pack files, in the same commit.
    pub fn publish_with(mut self, kept: &[String], retired: &[String]) -> Result<()> {
        let staging = self.staging_path();
        let mut names = staged_files(&staging)?;
        ensure!(
            names.iter().any(|n| n == metadata::FILE_NAME),
            Corrupt,
            "staging has no metadata.db"
        );
        names.retain(|n| n != metadata::FILE_NAME && !kept.contains(n));
        names.extend(kept.iter().cloned());
        names.push(metadata::FILE_NAME.to_string());
        // The replaced pack's own companion files go with it, unless the new pack writes a
        // file of the same name (which then replaces it).
        let replaced = self
            .replaced_companions
            .iter()
            .filter(|r| !names.contains(r) && !retired.contains(r));
        let retired: Vec<&String> = retired.iter().chain(replaced).collect();
        names.extend(retired.iter().map(|r| format!("{RETIRED}{r}")));
        // From the manifest on, an interrupt waits for the publish to finish.
        let publishing = interrupt::publishing();
        let manifest = staging.join(COMPLETE);
        fs::write(&manifest, names.join("\n") + "\n")?;
        File::open(&manifest)?.sync_all()?;
        File::open(&staging)?.sync_all()?;
        self.complete_publish(&staging)?;
        self.published = true;
        interrupt::published();
        drop(publishing);
        Ok(())
    }

    /// The idempotent publish steps; see the module doc.
    fn complete_publish(&self, staging: &Path) -> Result<()> {
        let manifest = fs::read_to_string(staging.join(COMPLETE))?;
        let lines: Vec<&str> = manifest.lines().filter(|l| !l.is_empty()).collect();
        let new_files: Vec<&str> = lines
            .iter()
            .copied()
            .filter(|l| !l.starts_with(RETIRED))
            .collect();
        let retired: Vec<&str> = lines
            .iter()
            .filter_map(|l| l.strip_prefix(RETIRED))
            .collect();
        let old = staging.join(OLD);
        fs::create_dir_all(&old)?;
        let rename = |from: &Path, to: &Path| {
            fs::rename(from, to)
                .with_context(|| format!("moving {} to {}", from.display(), to.display()))
        };
        let db = metadata::FILE_NAME;
        let staged = |name: &str| staging.join(name).exists();
        // 1. Take the old pack down: its metadata.db goes first.
        if staged(db) && self.dir.join(db).exists() {
            rename(&self.dir.join(db), &old.join(db))?;
        }
        // 2. Move aside every other old pack file not yet replaced, and the retired files.
        for name in pack_files_in(&self.dir)? {
            if name == db && !staged(db) {
                continue;
            }
            if !new_files.contains(&name.as_str()) || staged(&name) {
                rename(&self.dir.join(&name), &old.join(&name))?;
            }
        }
        for name in retired {
            if self.dir.join(name).exists() {
                rename(&self.dir.join(name), &old.join(name))?;
            }
        }
        // 3. Move the new files in, metadata.db last.
        for name in new_files.iter().filter(|n| **n != db) {
            if staged(name) {
                rename(&staging.join(name), &self.dir.join(name))?;
            }
        }
        if staged(db) {
            rename(&staging.join(db), &self.dir.join(db))?;
        }
        File::open(&self.dir)?.sync_all()?;
        fs::remove_dir_all(staging).with_context(|| format!("removing {}", staging.display()))?;
        Ok(())
    }
}

/// The companion files the pack in `dir` records in its `metadata.db` (none when there is
/// no readable one): the files this tool wrote or attached, and so may replace.
fn recorded_companions(dir: &Path) -> Vec<String> {
    let db = dir.join(metadata::FILE_NAME);
    if !db.is_file() {
        return Vec::new();
    }
    metadata::open_read_only(&db)
        .and_then(|conn| metadata::read_companions(&conn))
        .map(|records| records.into_iter().map(|r| r.file_name).collect())
        .unwrap_or_default()
}

/// `a, b, c` or `a, b, … (N files)` for messages.
pub fn list_names(names: &[String]) -> String {
    match names.len() {
        0..=4 => names.join(", "),
        n => format!("{}, … ({n} files)", names[..3].join(", ")),
    }
}

/// The files a command staged for publishing: every visible file in the staging folder (its
/// hidden bookkeeping left out).
fn staged_files(staging: &Path) -> Result<Vec<String>> {
    let mut names = Vec::new();
    for entry in fs::read_dir(staging).with_context(|| format!("listing {}", staging.display()))? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with('.') && entry.file_type()?.is_file() {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, body: &str) {
        fs::write(dir.join(name), body).unwrap();
    }

    #[test]
    fn publish_replaces_only_pack_files() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path();
        for (n, b) in [
            ("steps-00000.npy", "old0"),
            ("steps-00001.npy", "old1"),
            ("metadata.db", "olddb"),
            ("valuation_types.json", "oldv"),
            ("notes.txt", "mine"),
        ] {
            write(d, n, b);
        }
        assert!(OutputDir::open(d, false).is_err());
        let out = OutputDir::open(d, true).unwrap();
        let s = out.begin_staging().unwrap();
        for (n, b) in [
            ("steps-00000.npy", "new0"),
            ("metadata.db", "newdb"),
            ("valuation_types.json", "newv"),
        ] {
            write(&s, n, b);
        }
        out.publish_with(&[], &[]).unwrap();
        let mut names: Vec<_> = fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                "metadata.db",
                "notes.txt",
                "steps-00000.npy",
                "valuation_types.json"
            ]
        );
        assert_eq!(
            fs::read_to_string(d.join("steps-00000.npy")).unwrap(),
            "new0"
        );
        assert_eq!(fs::read_to_string(d.join("notes.txt")).unwrap(), "mine");
    }

    #[test]
    fn an_interrupted_publish_is_rolled_forward() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path();
        write(d, "steps-00000.npy", "old0");
        write(d, "steps-00001.npy", "old1");
        // Simulate a death after step 1 and part of step 3: the old db is gone, the new
        // shard 0 is in place, shard 1 is old, the new db is still staged.
        let s = d.join(STAGING);
        fs::create_dir_all(s.join(OLD)).unwrap();
        write(&s.join(OLD), "metadata.db", "olddb");
        write(&s, "metadata.db", "newdb");
        write(&s, "valuation_types.json", "newv");
        write(
            &s,
            COMPLETE,
            "steps-00000.npy\nvaluation_types.json\nmetadata.db\n",
        );
        write(d, "steps-00000.npy", "new0");
        let out = OutputDir::open(d, true).unwrap();
        drop(out);
        assert_eq!(
            fs::read_to_string(d.join("steps-00000.npy")).unwrap(),
            "new0"
        );
        assert_eq!(fs::read_to_string(d.join("metadata.db")).unwrap(), "newdb");
        assert_eq!(
            fs::read_to_string(d.join("valuation_types.json")).unwrap(),
            "newv"
        );
        assert!(!d.join("steps-00001.npy").exists());
        assert!(!s.exists());
    }

    #[test]
    fn an_incomplete_staging_folder_is_removed() {
        let t = tempfile::tempdir().unwrap();
        let s = t.path().join(STAGING);
        fs::create_dir_all(&s).unwrap();
        write(&s, "steps.npy", "partial");
        let _out = OutputDir::open(t.path(), false).unwrap();
        assert!(!s.exists());
    }
}
