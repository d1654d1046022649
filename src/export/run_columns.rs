//! Run facts as Parquet columns, for users whose query engine cannot read `metadata.db` (DuckDB
//! downloads its SQLite extension on first use): the columns of `runs` and `run_details`, on
//! every exported row with `--run-columns`, and one row per run in the `runs.parquet` a folder
//! export writes beside its parts.

use std::sync::Arc;

use arrow_array::{ArrayRef, Float64Array, Int64Array, StringArray};
use arrow_schema::{DataType, Field};

use super::{Selection, SourcePack};
use crate::format::metadata::{RunDetails, RunRow};

/// One run-level column: its name in `runs.parquet`, its name on exported rows (two names of
/// `runs`/`run_details` are also row columns, so rows get them with a `run_` prefix), its
/// type, and how to read it.
pub struct RunColumn {
    pub name: &'static str,
    pub row_name: &'static str,
    value: Value,
}

enum Value {
    Int(fn(&RunRow, &RunDetails) -> Option<i64>),
    Float(fn(&RunRow, &RunDetails) -> Option<f64>),
    Text(fn(&RunRow, &RunDetails) -> Option<String>),
}

impl RunColumn {
    pub fn data_type(&self) -> DataType {
        match self.value {
            Value::Int(_) => DataType::Int64,
            Value::Float(_) => DataType::Float64,
            Value::Text(_) => DataType::Utf8,
        }
    }

    /// The column's values for runs `picks` of the source (slots into `source.runs`).
    fn array(&self, source: &SourcePack, picks: impl Iterator<Item = usize>) -> ArrayRef {
        let none = RunDetails::default();
        let rows = picks.map(|slot| {
            let run = &source.runs[slot];
            (run, source.details.get(&run.id).unwrap_or(&none))
        });
        match &self.value {
            Value::Int(f) => Arc::new(Int64Array::from_iter(rows.map(|(r, d)| f(r, d)))),
            Value::Float(f) => Arc::new(Float64Array::from_iter(rows.map(|(r, d)| f(r, d)))),
            Value::Text(f) => Arc::new(StringArray::from_iter(rows.map(|(r, d)| f(r, d)))),
        }
    }
}

/// The run-level columns, `runs` first, then `run_details` (without its `run_id`).
pub fn columns() -> Vec<RunColumn> {
    let int = |name, row_name, f| RunColumn {
        name,
        row_name,
        value: Value::Int(f),
    };
    let text = |name, f| RunColumn {
        name,
        row_name: name,
        value: Value::Text(f),
    };
    vec![
        int("seed", "run_seed", |r, _| Some(r.seed)),
        int("steps", "steps", |r, _| Some(r.steps)),
        int("max_score", "max_score", |r, _| Some(r.max_score)),
        int("highest_tile", "highest_tile", |r, _| Some(r.highest_tile)),
        text("source_path", |_, d| d.source_path.clone()),
        text("rows_path", |_, d| d.rows_path.clone()),
        int("depth", "depth", |_, d| d.depth),
        int("game_index", "game_index", |_, d| d.game_index),
        int("num_moves", "num_moves", |_, d| d.num_moves),
        int("max_rank", "run_max_rank", |_, d| d.max_rank),
        int("sum_tile", "sum_tile", |_, d| d.sum_tile),
        RunColumn {
            name: "seconds",
            row_name: "seconds",
            value: Value::Float(|_, d| d.seconds),
        },
        text("source_pack", |_, d| d.source_pack.clone()),
        int("source_run_id", "source_run_id", |_, d| d.source_run_id),
        text("fingerprint", |_, d| d.fingerprint.clone()),
        int("sidecar_bytes", "sidecar_bytes", |_, d| d.sidecar_bytes),
        int("rows_bytes", "rows_bytes", |_, d| d.rows_bytes),
    ]
}

/// The fields the run columns add to exported rows.
pub fn row_fields(cols: &[RunColumn]) -> Vec<Field> {
    cols.iter()
        .map(|c| Field::new(c.row_name, c.data_type(), true))
        .collect()
}

/// The run columns' arrays for exported rows whose output positions are `positions`.
pub fn row_arrays(
    cols: &[RunColumn],
    source: &SourcePack,
    selection: &Selection,
    positions: &[u32],
) -> Vec<ArrayRef> {
    cols.iter()
        .map(|c| {
            c.array(
                source,
                positions.iter().map(|&p| selection.slots[p as usize]),
            )
        })
        .collect()
}

/// The fields and arrays of `runs.parquet`: `id`, then every run column, one row per run.
pub fn runs_table(source: &SourcePack, selection: &Selection) -> (Vec<Field>, Vec<ArrayRef>) {
    let cols = columns();
    let mut fields = vec![Field::new("id", DataType::Int64, false)];
    fields.extend(cols.iter().map(|c| Field::new(c.name, c.data_type(), true)));
    let ids: ArrayRef = Arc::new(Int64Array::from_iter_values(
        selection.slots.iter().map(|&s| source.runs[s].id),
    ));
    let mut arrays = vec![ids];
    arrays.extend(
        cols.iter()
            .map(|c| c.array(source, selection.slots.iter().copied())),
    );
    (fields, arrays)
}
