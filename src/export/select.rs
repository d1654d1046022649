//! Run selection for `export`: a list of run ids and inclusive ranges (`0,5,9-12`) and an SQL
//! selection (a [`RunFilter`], see [`crate::pack::query`]: a WHERE expression or a query
//! returning run ids, with parameter values), intersected when both are given; neither selects
//! every run.

use std::ops::RangeInclusive;

use rusqlite::Connection;

use super::{Selection, SourcePack};
use crate::error::{Result, err, fail};
use crate::format::metadata::{RunRow, no_depth_note};
use crate::pack::query::RunFilter;

/// Parses `0,5,9-12` into the inclusive id ranges it names.
pub fn parse_run_list(text: &str) -> Result<Vec<RangeInclusive<u32>>, String> {
    let number = |s: &str| {
        s.trim()
            .parse::<u32>()
            .map_err(|_| format!("{s:?} is not a run id (a number 0..=4294967295)"))
    };
    let mut ranges = Vec::new();
    for part in text.split(',').map(str::trim) {
        if part.is_empty() {
            return Err(format!("empty item in {text:?}"));
        }
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (number(a)?, number(b)?),
            None => (number(part)?, number(part)?),
        };
        if a > b {
            return Err(format!("range {part} runs backwards"));
        }
        ranges.push(a..=b);
    }
    Ok(ranges)
}

/// The selection given by run ids and an SQL filter (both optional).
pub fn select(
    source: &SourcePack,
    runs: Option<&[RangeInclusive<u32>]>,
    filter: Option<&RunFilter>,
) -> Result<Selection> {
    let mut keep: Vec<bool> = vec![true; source.runs.len()];
    if let Some(ranges) = runs {
        keep = vec![false; source.runs.len()];
        let mut unknown = Vec::new();
        for r in ranges {
            let slots = slots_in(&source.runs, r);
            keep[slots.clone()].fill(true);
            missing_ids(
                &source.runs,
                r,
                slots,
                10 - unknown.len().min(10),
                &mut unknown,
            );
        }
        if !unknown.is_empty() {
            unknown.sort_unstable();
            unknown.dedup();
            let list: Vec<String> = unknown.iter().take(10).map(u32::to_string).collect();
            return Err(err!(
                InvalidInput,
                "the run ids to export name ids {} does not have: {}{} (it has {} runs{})",
                source.dir.display(),
                list.join(", "),
                if unknown.len() >= 10 { ", …" } else { "" },
                source.runs.len(),
                id_span(source)
            )
            .with_option("runs"));
        }
    }
    if let Some(filter) = filter {
        let matched = selected_ids(filter, &source.db())?;
        for (slot, run) in source.runs.iter().enumerate() {
            keep[slot] &= matched.binary_search(&run.id).is_ok();
        }
    }
    let slots: Vec<usize> = (0..keep.len()).filter(|&s| keep[s]).collect();
    Ok(Selection::new(source, slots))
}

/// The slots of the runs (sorted by id) whose ids fall in `r`.
fn slots_in(runs: &[RunRow], r: &RangeInclusive<u32>) -> std::ops::Range<usize> {
    let lo = runs.partition_point(|run| run.id < i64::from(*r.start()));
    let hi = runs.partition_point(|run| run.id <= i64::from(*r.end()));
    lo..hi
}

/// Adds up to `limit` ids of `r` that no run of `slots` has (walks both in order, so the
/// cost is bounded by the pack's runs, not by the size of the range).
fn missing_ids(
    runs: &[RunRow],
    r: &RangeInclusive<u32>,
    slots: std::ops::Range<usize>,
    limit: usize,
    out: &mut Vec<u32>,
) {
    let mut present = runs[slots]
        .iter()
        .map(|run| u64::from(run.id as u32))
        .peekable();
    let end = out.len() + limit;
    let mut id = u64::from(*r.start());
    // Each step either passes a run of the pack or records a missing id.
    while id <= u64::from(*r.end()) && out.len() < end {
        if present.next_if_eq(&id).is_none() {
            out.push(id as u32);
        }
        id += 1;
    }
}

fn id_span(source: &SourcePack) -> String {
    match (source.runs.first(), source.runs.last()) {
        (Some(a), Some(b)) => format!(", ids {}..={}", a.id, b.id),
        _ => String::new(),
    }
}

/// The run ids (ascending) `filter` selects in the pack whose `metadata.db` is `conn`. A
/// selection SQLite cannot run, or one that returns what is not a run id, is the caller's
/// input: an error of kind `InvalidInput` (`Interrupted` when a limit stopped it, `Io` or
/// `Corrupt` when reading the pack failed), about the option `selection`.
pub(crate) fn selected_ids(filter: &RunFilter, conn: &Connection) -> Result<Vec<i64>> {
    filter.run_ids(conn)
}

/// Run ids and an SQL filter that select nothing are an error: an empty export is almost
/// surely a mistake in the expression.
pub fn require_some(source: &SourcePack, selection: &Selection, what: &str) -> Result<()> {
    if selection.is_empty() {
        let depths = source.details.values().map(|d| d.depth);
        match no_depth_note(what, depths) {
            Some(note) => fail!(
                InvalidInput,
                "{what} selects no runs: {note}; nothing was written"
            ),
            None => fail!(InvalidInput, "{what} selects no runs; nothing was written"),
        }
    }
    Ok(())
}

/// Describes a selection for the summary and for `session` of an exported pack, as the
/// command line gives it (`--runs 0-9 --where …`).
pub fn describe(runs: Option<&str>, filter: Option<&RunFilter>) -> String {
    match (runs, filter.map(RunFilter::describe)) {
        (None, None) => "all runs".to_string(),
        (Some(r), None) => format!("--runs {r}"),
        (None, Some(w)) => w,
        (Some(r), Some(w)) => format!("--runs {r} {w}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lists_and_ranges() {
        let ids = parse_run_list("0,5, 9-12").unwrap();
        assert_eq!(ids, [0..=0, 5..=5, 9..=12]);
        assert_eq!(parse_run_list("0-4294967295").unwrap(), [0..=u32::MAX]);
        assert!(parse_run_list("3-1").is_err());
        assert!(parse_run_list("1,,2").is_err());
        assert!(parse_run_list("x").is_err());
        assert!(parse_run_list("-1").is_err());
    }

    #[test]
    fn finds_unknown_ids_without_walking_huge_ranges() {
        let runs: Vec<RunRow> = [0, 1, 2, 5]
            .map(|id| RunRow {
                id,
                seed: 0,
                steps: 0,
                max_score: 0,
                highest_tile: 0,
            })
            .to_vec();
        let missing = |r: RangeInclusive<u32>| {
            let mut out = Vec::new();
            missing_ids(&runs, &r, slots_in(&runs, &r), 10, &mut out);
            out
        };
        assert_eq!(slots_in(&runs, &(1..=4)), 1..3);
        assert_eq!(missing(0..=2), [] as [u32; 0]);
        assert_eq!(missing(1..=6), [3, 4, 6]);
        assert_eq!(missing(4..=u32::MAX).len(), 10);
        assert_eq!(missing(4..=u32::MAX)[..3], [4, 6, 7]);
    }
}
