//! Cookbook: attach embeddings to a pack, one vector per row, and read them back.
//!
//! ```text
//! cargo run --release --example cookbook_attach -- [WORK_DIR]
//! ```
//!
//! Packs the fixture drop, computes a small float32 vector for every row (here from the
//! board: how many cells hold each tile, scaled; a model's embeddings in real life), writes
//! them as one `.npy` array of shape `[rows, 16]` in the pack's row order, and attaches it as
//! the companion family `embeddings`. A reader then gets a row's vector next to its step.

use std::io::Write;
use std::path::{Path, PathBuf};

use dataset_packer::{AttachOptions, Pack, RawPackOptions, attach, pack_raw};

const DIM: usize = 16;

/// Writes `rows` (each `DIM` float32) as a version 1.0 `.npy` file.
fn write_npy(path: &Path, rows: &[[f32; DIM]]) -> std::io::Result<()> {
    let mut header = format!(
        "{{'descr': '<f4', 'fortran_order': False, 'shape': ({}, {DIM}), }}",
        rows.len()
    );
    // Magic (6) + version (2) + length (2) + header + '\n' is a multiple of 64.
    header.push_str(&" ".repeat(63 - (10 + header.len()) % 64));
    header.push('\n');
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    out.write_all(b"\x93NUMPY\x01\x00")?;
    out.write_all(&(header.len() as u16).to_le_bytes())?;
    out.write_all(header.as_bytes())?;
    for row in rows {
        for v in row {
            out.write_all(&v.to_le_bytes())?;
        }
    }
    out.flush()
}

fn main() -> dataset_packer::Result<()> {
    let work = std::env::args_os().nth(1).map_or_else(
        || std::env::temp_dir().join("cookbook-attach"),
        PathBuf::from,
    );
    if work.exists() {
        std::fs::remove_dir_all(&work)?;
    }
    std::fs::create_dir_all(&work)?;
    let raw = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/raw");
    let path = work.join("pack");
    pack_raw(&raw, &path, &RawPackOptions::default())?;

    // One vector per row, in the pack's row order.
    let pack = Pack::open(&path)?;
    let vectors: Vec<[f32; DIM]> = pack
        .steps()
        .map(|step| {
            let mut v = [0f32; DIM];
            for e in step.exponents() {
                v[usize::from(e).min(DIM - 1)] += 1.0 / 16.0;
            }
            v
        })
        .collect();
    drop(pack);
    let array = work.join("embeddings.npy");
    write_npy(&array, &vectors)?;
    attach(&path, "embeddings", &[array], &AttachOptions::default())?;

    let pack = Pack::open(&path)?;
    let embeddings = pack.companion("embeddings")?;
    let row = pack.len() / 2;
    let v: Vec<f32> = embeddings.values(row)?;
    assert_eq!(v, vectors[row as usize]);
    println!(
        "attached embeddings: {} rows of {:?} {}",
        embeddings.len(),
        embeddings.shape(),
        embeddings.descr()
    );
    println!("row {row}: empty cells {:.4}, {} values", v[0], v.len());
    Ok(())
}
