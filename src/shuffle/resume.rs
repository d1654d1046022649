//! The resume state of a shuffle: progress.json in the work folder, saved after phase 1 and
//! after every bucket of phase 2, and what a new shuffle does with an interrupted one's
//! (continue it when resuming with the same plan, refuse other options, or start over).

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::plan::Plan;
use super::{Notices, ShuffleNotice};
use crate::error::{Context, Result, err};
use crate::pack::shard_writer::WriterState;

const PROGRESS_FILE: &str = "progress.json";

/// Progress recorded in the work folder after each step.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Progress {
    pub plan: Plan,
    /// Rows and CRC-32C of each bucket file, once phase 1 is complete.
    pub bucket_rows: Option<Vec<u64>>,
    pub bucket_crcs: Vec<u32>,
    pub buckets_done: u64,
    pub writer: Option<WriterState>,
    /// The companion writers' states, in plan order.
    #[serde(default)]
    pub companion_writers: Vec<WriterState>,
}

impl Progress {
    /// Replaces progress.json atomically. Not fsynced (nor are the files it describes): after a
    /// machine crash a resume verifies bucket files and output by their recorded CRCs.
    pub(super) fn save(&self, work: &Path) -> Result<()> {
        let tmp = work.join("progress.json.tmp");
        std::fs::write(&tmp, serde_json::to_vec_pretty(self)?)?;
        std::fs::rename(&tmp, work.join(PROGRESS_FILE))?;
        Ok(())
    }

    fn load(work: &Path) -> Option<Progress> {
        serde_json::from_slice(&std::fs::read(work.join(PROGRESS_FILE)).ok()?).ok()
    }
}

/// How a shuffle starts, decided before anything is written: continue the interrupted
/// shuffle's progress, or start afresh (discarding an interrupted shuffle's, if there is one).
pub(super) enum Start {
    Continue(Progress),
    Fresh { discarding: Option<Progress> },
}

impl Start {
    /// Whether the bucket files are already written (a resume after phase 1).
    pub(super) fn scattered(&self) -> bool {
        matches!(self, Start::Continue(p) if p.bucket_rows.is_some())
    }
}

/// Reads the work folder (and writes nothing): the interrupted shuffle's progress to continue
/// with `resume` and the same plan; refuses `resume` with other options.
pub(super) fn decide(work: &Path, plan: &Plan, resume: bool) -> Result<Start> {
    let interrupted = Progress::load(work);
    if !resume {
        return Ok(Start::Fresh {
            discarding: interrupted,
        });
    }
    match interrupted {
        Some(p) if p.plan == *plan => {
            log::info!(
                "resuming: {} of {} buckets done",
                p.buckets_done,
                plan.buckets
            );
            Ok(Start::Continue(p))
        }
        Some(p) => {
            let mut why = plan.differences(&p.plan);
            if why.is_empty() {
                why.push("its plan differs".into());
            }
            Err(err!(
                Refused,
                "the interrupted shuffle in {} was run with other options: {}; give the same options to continue it, or do not resume to start over",
                work.display(),
                why.join("; ")
            )
            .with_option("resume"))
        }
        None => {
            log::warn!(
                "resuming: no interrupted shuffle in {}; starting from the beginning",
                work.display()
            );
            Ok(Start::Fresh { discarding: None })
        }
    }
}

/// The progress to continue from: the interrupted shuffle's, or a new one in an emptied work
/// folder (`notices` hear of an interrupted shuffle that this discards).
pub(super) fn begin(work: &Path, plan: &Plan, start: Start, notices: &Notices) -> Result<Progress> {
    let discarding = match start {
        Start::Continue(p) => return Ok(p),
        Start::Fresh { discarding } => discarding,
    };
    if let Some(p) = discarding {
        notices.tell(ShuffleNotice::StartingOver {
            work: work.to_path_buf(),
            buckets_done: p.buckets_done,
            buckets: p.plan.buckets,
        });
    }
    if work.exists() {
        std::fs::remove_dir_all(work)
            .with_context(|| format!("removing old work folder {}", work.display()))?;
    }
    std::fs::create_dir_all(work).with_context(|| format!("creating {}", work.display()))?;
    let p = Progress {
        plan: plan.clone(),
        bucket_rows: None,
        bucket_crcs: Vec::new(),
        buckets_done: 0,
        writer: None,
        companion_writers: Vec::new(),
    };
    p.save(work)?;
    Ok(p)
}
