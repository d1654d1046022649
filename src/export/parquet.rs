//! `export --format parquet`: the selected rows as zstd-compressed Parquet with decoded columns
//! (`board` as 16 exponents, `valuation_type` as a dictionary-encoded name), for DuckDB, Polars,
//! pyarrow and Spark.
//!
//! Streaming and parallel: the rows are cut into row groups of at most [`ROW_GROUP_ROWS`]
//! source rows; worker threads encode whole row groups (column by column, fed in pieces, so
//! memory stays bounded) and the writer appends the finished column chunks in order. A path
//! ending in `.parquet` is one file; any other path is a folder of `part-NNNNN.parquet` files
//! of at most `--shard-rows` rows each (default [`DEFAULT_FILE_ROWS`]).

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use arrow_array::types::UInt8Type;
use arrow_array::{
    ArrayRef, DictionaryArray, FixedSizeListArray, Float32Array, Int32Array, RecordBatch,
    StringArray, UInt8Array, UInt32Array,
};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_writer::{ArrowColumnChunk, ArrowRowGroupWriterFactory, compute_leaves};
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::types::ColumnPath;

use super::output::{StagedDir, StagedFile};
use super::run_columns::{self, RunColumn};
use super::{PIECE_ROWS, Piece, RowCounts, Selection, SourcePack, companion_columns, tally};
use crate::error::{Context, Error, ErrorKind, Result, err};
use crate::format::board;
use crate::format::row::ROW_BYTES;
use crate::format::row::StepRow;
use crate::ordered::ordered_try_map;
use crate::pack::families::Family;
use crate::progress::{Bar, Observer};

/// Source rows per row group (a multiple of the piece size).
pub const ROW_GROUP_ROWS: u64 = 4 * PIECE_ROWS;
/// Rows per file of a folder export when `--shard-rows` is not given.
pub const DEFAULT_FILE_ROWS: u64 = 1 << 20;

/// What a Parquet export wrote.
pub struct Written {
    pub runs: usize,
    pub rows: u64,
    pub files: usize,
}

/// Whether an output path names a single Parquet file.
pub fn is_single_file(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "parquet")
}

/// The table of runs a folder export writes beside its parts.
pub const RUNS_FILE: &str = "runs.parquet";

/// The files a folder export writes (and so may replace with --overwrite).
pub fn owns(name: &str) -> bool {
    name == RUNS_FILE
        || name
            .strip_prefix("part-")
            .and_then(|s| s.strip_suffix(".parquet"))
            .is_some_and(|d| d.len() == 5 && d.bytes().all(|c| c.is_ascii_digit()))
}

fn part_name(index: usize) -> String {
    format!("part-{index:05}.parquet")
}

/// The Arrow schema of the exported rows: the pack's columns, the run columns (with
/// `--run-columns`), then one column per companion family carried (named after it).
pub fn schema(companions: &[&Family], run_cols: &[RunColumn]) -> Result<SchemaRef> {
    let mut fields = row_fields();
    fields.extend(run_columns::row_fields(run_cols));
    for f in companions {
        if fields.iter().any(|c| c.name() == &f.name) {
            return Err(err!(
                Unsupported,
                "companion {} has the name of a row column; leave it out of the export (or attach it under another name)",
                f.name
            )
            .with_option("drop_companion"));
        }
        let dtype = f.header_dtype();
        let column = companion_columns::arrow_type(dtype, &f.trailing).map_err(|e| {
            err!(
                Unsupported,
                "companion {} ({}): {e}; leave it out to export without it",
                f.name,
                f.describe()
            )
            .with_option("drop_companion")
        })?;
        fields.push(Field::new(&f.name, column, false));
    }
    Ok(Arc::new(Schema::new(fields)))
}

/// The columns of the pack's rows.
fn row_fields() -> Vec<Field> {
    let list =
        |item: DataType, n| DataType::FixedSizeList(Arc::new(Field::new("item", item, false)), n);
    vec![
        Field::new("run_id", DataType::UInt32, false),
        Field::new("step_index", DataType::UInt32, false),
        Field::new("board", list(DataType::UInt8, 16), false),
        Field::new("board_eval", DataType::Int32, false),
        Field::new("move_dir", DataType::UInt8, false),
        Field::new(
            "valuation_type",
            DataType::Dictionary(Box::new(DataType::UInt8), Box::new(DataType::Utf8)),
            false,
        ),
        Field::new("ev_legal", DataType::UInt8, false),
        Field::new("max_rank", DataType::UInt8, false),
        Field::new("seed", DataType::UInt32, false),
        Field::new("branch_evs", list(DataType::Float32, 4), false),
    ]
}

fn properties(source: &SourcePack) -> Result<WriterProperties> {
    Ok(WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(1)?))
        // Near-unique values: a dictionary would be built, overflow and be thrown away.
        .set_column_dictionary_enabled(ColumnPath::from("board_eval"), false)
        .set_column_dictionary_enabled(
            ColumnPath::new(vec!["branch_evs".into(), "list".into(), "item".into()]),
            false,
        )
        .set_created_by(format!("dataset-packer {}", env!("CARGO_PKG_VERSION")))
        .set_key_value_metadata(Some(vec![KeyValue::new(
            "dataset_packer.source_pack".to_string(),
            source.canonical_path(),
        )]))
        .build())
}

/// Decodes 48-byte rows into the export's columns.
struct Columns {
    run_id: Vec<u32>,
    step_index: Vec<u32>,
    board: Vec<u8>,
    board_eval: Vec<i32>,
    move_dir: Vec<u8>,
    valuation_type: Vec<u8>,
    ev_legal: Vec<u8>,
    max_rank: Vec<u8>,
    seed: Vec<u32>,
    branch_evs: Vec<f32>,
}

impl Columns {
    fn with_capacity(n: usize) -> Columns {
        Columns {
            run_id: Vec::with_capacity(n),
            step_index: Vec::with_capacity(n),
            board: Vec::with_capacity(16 * n),
            board_eval: Vec::with_capacity(n),
            move_dir: Vec::with_capacity(n),
            valuation_type: Vec::with_capacity(n),
            ev_legal: Vec::with_capacity(n),
            max_rank: Vec::with_capacity(n),
            seed: Vec::with_capacity(n),
            branch_evs: Vec::with_capacity(4 * n),
        }
    }

    fn push(&mut self, r: &StepRow) {
        self.run_id.push(r.run_id);
        self.step_index.push(r.step_index);
        self.board
            .extend_from_slice(&board::unpack(r.board, r.tile_65536_mask));
        self.board_eval.push(r.board_eval);
        self.move_dir.push(r.move_dir);
        self.valuation_type.push(r.valuation_type);
        self.ev_legal.push(r.ev_legal);
        self.max_rank.push(r.max_rank);
        self.seed.push(r.seed);
        self.branch_evs.extend_from_slice(&r.branch_evs);
    }

    fn len(&self) -> usize {
        self.run_id.len()
    }

    /// The Arrow arrays, in schema order.
    fn into_arrays(self, schema: &Schema, names: &ArrayRef) -> Result<Vec<ArrayRef>> {
        let list = |field: usize, n: i32, values: ArrayRef| -> Result<ArrayRef> {
            let DataType::FixedSizeList(item, _) = schema.field(field).data_type() else {
                unreachable!("schema() declares a list here")
            };
            Ok(Arc::new(FixedSizeListArray::try_new(
                item.clone(),
                n,
                values,
                None,
            )?))
        };
        let keys = UInt8Array::from(self.valuation_type);
        let valuation = DictionaryArray::<UInt8Type>::try_new(keys, names.clone())
            .context("a row's valuation_type id is not in valuation_types.json")?;
        Ok(vec![
            Arc::new(UInt32Array::from(self.run_id)),
            Arc::new(UInt32Array::from(self.step_index)),
            list(2, 16, Arc::new(UInt8Array::from(self.board)))?,
            Arc::new(Int32Array::from(self.board_eval)),
            Arc::new(UInt8Array::from(self.move_dir)),
            Arc::new(valuation),
            Arc::new(UInt8Array::from(self.ev_legal)),
            Arc::new(UInt8Array::from(self.max_rank)),
            Arc::new(UInt32Array::from(self.seed)),
            list(9, 4, Arc::new(Float32Array::from(self.branch_evs)))?,
        ])
    }
}

/// One encoded row group.
struct Group {
    chunks: Vec<ArrowColumnChunk>,
    rows: u64,
    tally: Vec<(u32, u64)>,
}

/// Encodes row groups; shared by the worker threads.
struct Encoder<'a> {
    source: &'a SourcePack,
    selection: &'a Selection,
    companions: &'a [&'a Family],
    run_cols: Vec<RunColumn>,
    schema: SchemaRef,
    names: ArrayRef,
    factory: ArrowRowGroupWriterFactory,
}

impl Encoder<'_> {
    fn encode(&self, pieces: &[Piece]) -> Result<Group> {
        let mut writers = self.factory.create_column_writers(0)?;
        let mut rows = 0u64;
        let mut counts = Vec::new();
        let mut keep = Vec::new();
        let mut positions = Vec::new();
        let mut companion_rows = Vec::new();
        for piece in pieces {
            let src = self.source.read(piece)?;
            let mut cols = Columns::with_capacity(piece.count as usize);
            keep.clear();
            positions.clear();
            for row in src.chunks_exact(ROW_BYTES) {
                let id = u32::from_le_bytes(row[..4].try_into().unwrap());
                let selected = self.selection.position(id)?;
                keep.push(selected.is_some());
                if let Some(pos) = selected {
                    tally(&mut counts, pos);
                    positions.push(pos);
                    cols.push(&StepRow::from_bytes(row));
                }
            }
            if cols.len() == 0 {
                continue;
            }
            let n = cols.len();
            rows += n as u64;
            let mut arrays = cols.into_arrays(&self.schema, &self.names)?;
            arrays.extend(run_columns::row_arrays(
                &self.run_cols,
                self.source,
                self.selection,
                &positions,
            ));
            for family in self.companions {
                family.open(piece.shard)?.read_rows(
                    piece.start,
                    piece.count,
                    &mut companion_rows,
                )?;
                crate::pack::families::keep_rows(&mut companion_rows, family.row_bytes, &keep);
                arrays.push(companion_columns::rows_to_array(
                    family.header_dtype(),
                    &family.trailing,
                    &companion_rows,
                    n,
                )?);
            }
            let mut leaf_writers = writers.iter_mut();
            for (array, field) in arrays.iter().zip(self.schema.fields()) {
                for leaf in compute_leaves(field, array)? {
                    leaf_writers
                        .next()
                        .expect("one writer per leaf")
                        .write(&leaf)?;
                }
            }
        }
        let chunks = writers
            .into_iter()
            .map(|w| w.close())
            .collect::<parquet::errors::Result<_>>()?;
        Ok(Group {
            chunks,
            rows,
            tally: counts,
        })
    }
}

/// The output: one file, or a folder of part files.
enum Sink {
    File(StagedFile),
    Dir {
        dir: StagedDir,
        file_rows: u64,
        parts: usize,
    },
}

/// An open Parquet file and the rows in it so far.
struct OpenFile {
    writer: SerializedFileWriter<File>,
    rows: u64,
}

fn open_file(
    file: File,
    schema: &SchemaRef,
    props: WriterProperties,
) -> Result<(OpenFile, ArrowRowGroupWriterFactory)> {
    let (writer, factory) =
        ArrowWriter::try_new(file, schema.clone(), Some(props))?.into_serialized_writer()?;
    Ok((OpenFile { writer, rows: 0 }, factory))
}

fn close_file(f: OpenFile) -> Result<File> {
    Ok(f.writer.into_inner()?)
}

/// Writes the selected rows as Parquet into `target` (a `.parquet` file or a folder).
pub fn write(
    source: &SourcePack,
    selection: &Selection,
    target: &Path,
    opts: &ParquetOptions,
) -> Result<Written> {
    let run_cols = if opts.run_columns {
        run_columns::columns()
    } else {
        Vec::new()
    };
    let schema = schema(opts.companions, &run_cols)?;
    let props = properties(source)?;
    let names: ArrayRef = Arc::new(StringArray::from(
        source
            .valuations
            .names()
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    ));
    let (mut sink, first) = if is_single_file(target) {
        let (staged, file) = StagedFile::create(target, opts.overwrite)?;
        (Sink::File(staged), file)
    } else {
        let dir = StagedDir::create(target, opts.overwrite, owns)?;
        let file = File::create(dir.path().join(part_name(0)))?;
        let file_rows = opts.file_rows.unwrap_or(DEFAULT_FILE_ROWS);
        (
            Sink::Dir {
                dir,
                file_rows,
                parts: 1,
            },
            file,
        )
    };
    let (mut current, factory) = open_file(first, &schema, props.clone())?;
    let group_rows = match &sink {
        Sink::Dir { file_rows, .. } => ROW_GROUP_ROWS.min(*file_rows),
        Sink::File(_) => ROW_GROUP_ROWS,
    };
    let groups = row_groups(&source.plan(selection), group_rows);
    let encoder = Encoder {
        source,
        selection,
        companions: opts.companions,
        run_cols,
        schema: schema.clone(),
        names,
        factory,
    };
    let mut counts = RowCounts::new(selection);
    let total: u64 = groups.iter().flatten().map(|p| p.count).sum();
    let bar = Bar::rows(&opts.progress, "export", total);
    let outcome = ordered_try_map(
        &groups,
        opts.workers,
        opts.workers + 1,
        || (),
        |_, pieces| encoder.encode(pieces),
        |i, group: Result<Group>| {
            let g = group?;
            counts.add(&g.tally);
            if let Sink::Dir {
                dir,
                file_rows,
                parts,
            } = &mut sink
                && current.rows > 0
                && current.rows + g.rows > *file_rows
            {
                let file = File::create(dir.path().join(part_name(*parts)))?;
                *parts += 1;
                let (next, _) = open_file(file, &schema, props.clone())?;
                close_file(std::mem::replace(&mut current, next))?;
            }
            append(&mut current, g)?;
            bar.inc(groups[i].iter().map(|p| p.count).sum());
            Ok(())
        },
    );
    bar.finish_and_clear();
    outcome?;
    counts.verify(source, selection)?;
    let last = close_file(current)?;
    let files = match sink {
        Sink::File(staged) => {
            staged.publish(last)?;
            1
        }
        Sink::Dir { dir, parts, .. } => {
            drop(last);
            write_runs_file(&dir.path().join(RUNS_FILE), source, selection, props)?;
            dir.publish()?;
            parts
        }
    };
    Ok(Written {
        runs: selection.len(),
        rows: counts.total(),
        files,
    })
}

/// Writes `runs.parquet`: one row per selected run, its `runs` and `run_details` columns.
fn write_runs_file(
    path: &Path,
    source: &SourcePack,
    selection: &Selection,
    props: WriterProperties,
) -> Result<()> {
    let (fields, arrays) = run_columns::runs_table(source, selection);
    let schema = Arc::new(Schema::new(fields));
    let batch = RecordBatch::try_new(schema.clone(), arrays)?;
    let file = File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut writer = ArrowWriter::try_new(file, schema, Some(props))?;
    writer.write(&batch)?;
    writer.into_inner()?.sync_all()?;
    Ok(())
}

/// Options of a Parquet export.
pub struct ParquetOptions<'a> {
    pub overwrite: bool,
    pub progress: Observer,
    pub workers: usize,
    /// Rows per part file of a folder export.
    pub file_rows: Option<u64>,
    /// Companion families to export as columns.
    pub companions: &'a [&'a Family],
    /// Add the run-level columns (`runs` and `run_details`) to every row.
    pub run_columns: bool,
}

fn append(f: &mut OpenFile, g: Group) -> Result<()> {
    if g.rows == 0 {
        return Ok(());
    }
    let mut rg = f.writer.next_row_group()?;
    for chunk in g.chunks {
        chunk.append_to_row_group(&mut rg)?;
    }
    rg.close()?;
    f.rows += g.rows;
    Ok(())
}

/// Groups pieces into row groups of at most `limit` source rows (pieces are split to fit).
fn row_groups(plan: &[Piece], limit: u64) -> Vec<Vec<Piece>> {
    let mut groups: Vec<Vec<Piece>> = Vec::new();
    let mut current: Vec<Piece> = Vec::new();
    let mut rows = 0u64;
    for piece in plan {
        let mut p = *piece;
        while p.count > 0 {
            let take = p.count.min(limit - rows);
            current.push(Piece { count: take, ..p });
            p.start += take;
            p.count -= take;
            rows += take;
            if rows == limit {
                groups.push(std::mem::take(&mut current));
                rows = 0;
            }
        }
    }
    if !current.is_empty() {
        groups.push(current);
    }
    groups
}

// Arrow and Parquet fail on what they are given (a companion's shape, a column) or on the
// file they write; either way the export stops with their message as the cause.
impl From<parquet::errors::ParquetError> for Error {
    fn from(e: parquet::errors::ParquetError) -> Error {
        Error::wrap(ErrorKind::Io, e)
    }
}

impl From<arrow_schema::ArrowError> for Error {
    fn from(e: arrow_schema::ArrowError) -> Error {
        Error::wrap(ErrorKind::Unsupported, e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_groups_split_pieces_to_fit() {
        let p = |start, count| Piece {
            shard: 0,
            start,
            count,
        };
        let groups = row_groups(&[p(0, 5), p(5, 7)], 4);
        let sizes: Vec<Vec<u64>> = groups
            .iter()
            .map(|g| g.iter().map(|p| p.count).collect())
            .collect();
        assert_eq!(sizes, [vec![4], vec![1, 3], vec![4]]);
        assert_eq!(groups[1][1].start, 5);
        assert_eq!(groups[2][0].start, 8);
    }

    #[test]
    fn owns_only_part_files() {
        assert!(owns("part-00000.parquet"));
        assert!(!owns("part-0.parquet") && !owns("x.parquet"));
    }
}
