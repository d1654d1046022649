//! Packs in the layout of the reference packer (2048former's `crates/dataset-packer`), built
//! from a pack of this tool: 46-byte rows written by npyz itself with the dtype that packer
//! declares (`'<u1'` one-byte fields), a `metadata.db` holding only `runs` and an empty
//! `session` (its schema, left in WAL mode as that packer leaves it), and
//! `valuation_types.json` as a pretty-printed name → id object.
#![allow(dead_code)]

use std::path::Path;

use npyz::{DType, Field, TypeStr, WriterBuilder};

use crate::common::{names, read_rows, runs_table};

/// One row as the reference packer declares it: the spec's fields back to back, no padding.
#[derive(
    Clone, Copy, Debug, PartialEq, npyz::Serialize, npyz::Deserialize, npyz::AutoSerialize,
)]
pub struct ReferenceRow {
    pub run_id: u32,
    pub step_index: u32,
    pub board: u64,
    pub board_eval: i32,
    pub tile_65536_mask: u16,
    pub move_dir: u8,
    pub valuation_type: u8,
    pub ev_legal: u8,
    pub max_rank: u8,
    pub seed: u32,
    pub branch_evs: [f32; 4],
}

impl ReferenceRow {
    /// A 48-byte row of this tool as the reference packer would have written it.
    pub fn from_spec(b: &[u8; 48]) -> ReferenceRow {
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
        let f32_at = |i: usize| f32::from_le_bytes(b[i..i + 4].try_into().unwrap());
        ReferenceRow {
            run_id: u32_at(0),
            step_index: u32_at(4),
            board: u64::from_le_bytes(b[8..16].try_into().unwrap()),
            board_eval: i32::from_le_bytes(b[16..20].try_into().unwrap()),
            tile_65536_mask: u16::from_le_bytes(b[20..22].try_into().unwrap()),
            move_dir: b[22],
            valuation_type: b[23],
            ev_legal: b[24],
            max_rank: b[25],
            seed: u32_at(28),
            branch_evs: [f32_at(32), f32_at(36), f32_at(40), f32_at(44)],
        }
    }
}

/// The dtype as the reference packer spells it: `'<u1'` for the one-byte fields.
pub fn reference_dtype() -> DType {
    let plain = |t: &str| DType::Plain(t.parse::<TypeStr>().unwrap());
    let field = |name: &str, dtype: DType| Field {
        name: name.into(),
        dtype,
    };
    DType::Record(vec![
        field("run_id", plain("<u4")),
        field("step_index", plain("<u4")),
        field("board", plain("<u8")),
        field("board_eval", plain("<i4")),
        field("tile_65536_mask", plain("<u2")),
        field("move_dir", plain("<u1")),
        field("valuation_type", plain("<u1")),
        field("ev_legal", plain("<u1")),
        field("max_rank", plain("<u1")),
        field("seed", plain("<u4")),
        field("branch_evs", DType::Array(4, Box::new(plain("<f4")))),
    ])
}

/// Writes `rows` to `path` with npyz, the way the reference packer streams a shard.
pub fn write_npyz(path: &Path, rows: &[ReferenceRow]) {
    let file = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut writer = npyz::WriteOptions::new()
        .dtype(reference_dtype())
        .writer(file)
        .begin_1d()
        .unwrap();
    writer.extend(rows.iter().copied()).unwrap();
    writer.finish().unwrap();
}

/// The reference packer's `metadata.db` schema, as it creates it.
const REFERENCE_SCHEMA: &str = "
        CREATE TABLE IF NOT EXISTS runs (
            id INTEGER PRIMARY KEY,
            seed BIGINT NOT NULL,
            steps INT NOT NULL,
            max_score INT NOT NULL,
            highest_tile INT NOT NULL
        );
        CREATE TABLE IF NOT EXISTS session (
            meta_key TEXT PRIMARY KEY,
            meta_value TEXT NOT NULL
        );
";

/// Rewrites the pack of this tool at `src` as the reference packer would have written it into
/// `dst`: shards of `shard_rows` rows (None: one `steps.npy`), and on every row of a tuple
/// valuation `ev_legal` = 0b1111, since the rows that packer read logged 0.0 for illegal tuple
/// moves and it marked every move with an EV as legal. Returns how many rows that changes.
pub fn make_reference_pack(src: &Path, dst: &Path, shard_rows: Option<usize>) -> u64 {
    std::fs::create_dir_all(dst).unwrap();
    let valuations: Vec<String> =
        serde_json::from_slice(&std::fs::read(src.join("valuation_types.json")).unwrap()).unwrap();
    let mut changed = 0;
    let rows: Vec<ReferenceRow> = read_rows(src)
        .iter()
        .map(|b| {
            let mut row = ReferenceRow::from_spec(b);
            if valuations[row.valuation_type as usize].starts_with("tuple") {
                changed += u64::from(row.ev_legal != 0b1111);
                row.ev_legal = 0b1111;
            }
            row
        })
        .collect();
    match shard_rows {
        None => write_npyz(&dst.join("steps.npy"), &rows),
        Some(n) => {
            for (i, part) in rows.chunks(n).enumerate() {
                write_npyz(&dst.join(format!("steps-{i:05}.npy")), part);
            }
        }
    }
    let runs = runs_table(src);
    let conn = rusqlite::Connection::open(dst.join("metadata.db")).unwrap();
    conn.pragma_update(None, "journal_mode", "WAL").unwrap();
    conn.pragma_update(None, "synchronous", "NORMAL").unwrap();
    conn.execute_batch(REFERENCE_SCHEMA).unwrap();
    for r in &runs {
        conn.execute(
            "INSERT INTO runs (id, seed, steps, max_score, highest_tile) VALUES (?1, ?2, ?3, ?4, ?5)",
            rusqlite::params![r.0, r.1, r.2, r.3, r.4],
        )
        .unwrap();
    }
    drop(conn);
    // serde_json's pretty printer over a hash map: names in no particular order.
    let body: Vec<String> = valuations
        .iter()
        .enumerate()
        .rev()
        .map(|(id, name)| format!("  \"{name}\": {id}"))
        .collect();
    std::fs::write(
        dst.join("valuation_types.json"),
        format!("{{\n{}\n}}\n", body.join(",\n")),
    )
    .unwrap();
    assert!(
        names(dst).iter().all(|n| !n.ends_with("-wal")),
        "the reference packer's metadata.db is closed cleanly"
    );
    changed
}
