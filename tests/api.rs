//! The public reader API (`dataset_packer::Pack`) against what the binary writes and says:
//! every row decoded through `Step` equals the shard bytes and `show --json`; runs, selection
//! and companions match metadata.db and the files; damaged packs are refused naming the file.

mod common;

use std::path::Path;

use common::*;
use dataset_packer::Pack;
use serde_json::Value;

const MOVES: [&str; 4] = ["up", "down", "left", "right"];

/// The fixture drop packed with `extra` arguments into `dir/name`.
fn packed(dir: &Path, name: &str, extra: &[&str]) -> std::path::PathBuf {
    let out = dir.join(name);
    pack(&fixture("raw"), &out, extra);
    out
}

/// Every field of a row, decoded from its 48 bytes independently of the library.
struct Fields {
    run: u32,
    index: u32,
    board: u64,
    eval: i32,
    mask: u16,
    dir: u8,
    vt: u8,
    legal: u8,
    rank: u8,
    seed: u32,
    evs: [f32; 4],
}

fn fields(row: &[u8; 48]) -> Fields {
    let u32_at = |o: usize| u32::from_le_bytes(row[o..o + 4].try_into().unwrap());
    Fields {
        run: u32_at(0),
        index: u32_at(4),
        board: u64::from_le_bytes(row[8..16].try_into().unwrap()),
        eval: u32_at(16) as i32,
        mask: u16::from_le_bytes([row[20], row[21]]),
        dir: row[22],
        vt: row[23],
        legal: row[24],
        rank: row[25],
        seed: u32_at(28),
        evs: [0, 1, 2, 3].map(|k| f32::from_bits(u32_at(32 + 4 * k))),
    }
}

#[test]
fn every_row_through_the_api_equals_the_shard_bytes_across_shards() {
    let t = tempfile::tempdir().unwrap();
    // 7-row shards: runs span many shards, and rows are read across every boundary.
    let p = packed(t.path(), "p", &["--shard-rows", "7"]);
    let pack = Pack::open(&p).unwrap();
    let rows = read_rows(&p);
    assert_eq!(pack.len(), rows.len() as u64);
    assert_eq!(pack.len(), 2240);
    assert_eq!(pack.steps().len(), rows.len());
    let mut seen = 0;
    for (i, (step, row)) in pack.steps().zip(&rows).enumerate() {
        let Fields {
            run,
            index,
            board,
            eval,
            mask,
            dir,
            vt,
            legal,
            rank,
            seed,
            evs,
        } = fields(row);
        assert_eq!(step.run_id(), run, "row {i}");
        assert_eq!(step.step_index(), index);
        assert_eq!(step.board_eval(), eval);
        assert_eq!(step.move_dir(), dir);
        assert_eq!(step.valuation_type(), vt);
        assert_eq!(step.legal(), [0, 1, 2, 3].map(|k| legal & (1 << k) != 0));
        assert_eq!(step.max_rank(), rank);
        assert_eq!(step.seed(), seed);
        assert_eq!(step.branch_evs().map(f32::to_bits), evs.map(f32::to_bits));
        let cells: [u8; 16] = std::array::from_fn(|c| {
            if mask & (1 << c) != 0 {
                16
            } else {
                ((board >> (60 - 4 * c)) & 0xf) as u8
            }
        });
        assert_eq!(step.exponents(), cells);
        assert_eq!(
            pack.row(i as u64).unwrap().step_index(),
            index,
            "row({i}) is the same row"
        );
        seen += 1;
    }
    assert_eq!(seen, rows.len());
    // A range that starts and ends inside shards.
    let middle: Vec<u32> = pack.steps_in(12..30).map(|s| s.step_index()).collect();
    let expected: Vec<u32> = rows[12..30].iter().map(|r| fields(r).index).collect();
    assert_eq!(middle, expected);
    assert_eq!(pack.steps_in(2239..5000).len(), 1);
    assert_eq!(pack.steps_in(3000..4000).len(), 0);
    let e = pack.row(2240).unwrap_err().to_string();
    assert!(
        e.contains("row 2240 is past the end") && e.contains("2240 rows"),
        "{e}"
    );
}

#[test]
fn runs_hold_what_show_prints() {
    let t = tempfile::tempdir().unwrap();
    let p = packed(t.path(), "p", &["--shard-rows", "100"]);
    let pack = Pack::open(&p).unwrap();
    assert_eq!(pack.num_runs(), 10);
    let runs = runs_table(&p);
    let names = pack.valuation_names().to_vec();
    let mut total = 0;
    for run in pack.runs().unwrap() {
        let run = run.unwrap();
        let (id, seed, steps, _, _) = runs[run.id() as usize];
        assert_eq!((i64::from(run.id()), run.len() as i64), (id, steps));
        let by_id = pack.run(run.id()).unwrap();
        assert_eq!(
            (by_id.first_row(), by_id.len()),
            (run.first_row(), run.len())
        );
        let shown: Value = serde_json::from_str(&run_ok(&[
            "show",
            s(&p),
            "--run",
            &run.id().to_string(),
            "--json",
            "--limit",
            "100000",
        ]))
        .unwrap();
        let shown = shown["steps"].as_array().unwrap();
        assert_eq!(shown.len() as u64, run.len());
        for (step, want) in run.steps().zip(shown) {
            assert_eq!(step.run_id(), run.id());
            assert_eq!(i64::from(step.seed()), seed);
            assert_eq!(
                step.step_index() as u64,
                want["step_index"].as_u64().unwrap()
            );
            assert_eq!(MOVES[step.move_dir() as usize], want["move"]);
            assert_eq!(
                names[step.valuation_type() as usize],
                want["valuation_type"].as_str().unwrap()
            );
            assert_eq!(
                i64::from(step.board_eval()),
                want["board_eval"].as_i64().unwrap()
            );
            assert_eq!(
                u64::from(step.max_rank()),
                want["max_rank"].as_u64().unwrap()
            );
            let tiles: Vec<u64> = want["board"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|r| r.as_array().unwrap().iter().map(|v| v.as_u64().unwrap()))
                .collect();
            let ours: Vec<u64> = step
                .exponents()
                .iter()
                .map(|&e| if e == 0 { 0 } else { 1 << e })
                .collect();
            assert_eq!(ours, tiles);
            for (k, m) in MOVES.iter().enumerate() {
                assert_eq!(step.legal()[k], want["legal"][m].as_bool().unwrap());
                let ev = want["branch_evs"][m].as_f64().unwrap();
                assert!((f64::from(step.branch_evs()[k]) - ev).abs() <= ev.abs() * 1e-6);
            }
        }
        total += run.len();
    }
    assert_eq!(total, pack.len());
    let e = pack.run(10).unwrap_err().to_string();
    assert!(
        e.contains("run 10 is not in") && e.contains("10 runs, ids 0–9"),
        "{e}"
    );
}

#[test]
fn select_uses_the_export_where_rules() {
    let t = tempfile::tempdir().unwrap();
    let p = packed(t.path(), "p", &[]);
    let pack = Pack::open(&p).unwrap();
    let db = db(&p);
    let want: Vec<u32> = db
        .prepare("SELECT run_id FROM run_details WHERE depth = 7 ORDER BY run_id")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert!(!want.is_empty() && want.len() < 10);
    assert_eq!(pack.select("depth = 7").unwrap(), want);
    assert_eq!(
        pack.select("SELECT run_id FROM run_details WHERE depth = 7")
            .unwrap(),
        want
    );
    let param = dataset_packer::Param::parse("d=7").unwrap();
    assert_eq!(pack.select_with("depth = :d", &[param]).unwrap(), want);
    // The exported pack of the same selection holds exactly those runs.
    let out = t.path().join("sel");
    run_ok(&[
        "export",
        s(&p),
        "--where",
        "depth = 7",
        "--format",
        "pack",
        "--output",
        s(&out),
        "--quiet",
    ]);
    assert_eq!(Pack::open(&out).unwrap().num_runs(), want.len());
    let e = pack.select("DELETE FROM runs").unwrap_err().to_string();
    assert!(e.contains("is a DELETE statement"), "{e}");
    let e = pack.select("dept = 7").unwrap_err().to_string();
    assert!(e.contains("did you mean depth?"), "{e}");
}

#[test]
fn companions_are_typed_views_of_their_files() {
    let t = tempfile::tempdir().unwrap();
    let p = packed(t.path(), "p", &["--shard-rows", "1000"]);
    // emb: two f32 per row, the row's global index and its negation; one file per shard.
    let mut global = 0u64;
    for (i, rows) in [1000u64, 1000, 240].into_iter().enumerate() {
        let mut bytes = npy_header_shape("'<f4'", &format!("({rows}, 2)"));
        for _ in 0..rows {
            bytes.extend_from_slice(&(global as f32).to_le_bytes());
            bytes.extend_from_slice(&(-(global as f32)).to_le_bytes());
            global += 1;
        }
        std::fs::write(p.join(format!("emb-{i:05}.npy")), bytes).unwrap();
    }
    // tag: a structured dtype, one item per row.
    for (i, rows) in [1000u64, 1000, 240].into_iter().enumerate() {
        let mut bytes = npy_header_shape("[('id', '<i8'), ('w', '<f4')]", &format!("({rows},)"));
        for r in 0..rows {
            bytes.extend_from_slice(&((i as i64) * 1000 + r as i64).to_le_bytes());
            bytes.extend_from_slice(&0.5f32.to_le_bytes());
        }
        std::fs::write(p.join(format!("tag-{i:05}.npy")), bytes).unwrap();
    }
    // bad: one file short, so it does not line up.
    std::fs::write(
        p.join("bad-00000.npy"),
        [npy_header_shape("'<f4'", "(1000,)"), vec![0; 4000]].concat(),
    )
    .unwrap();
    let pack = Pack::open(&p).unwrap();
    assert_eq!(pack.companion_names(), ["emb", "tag"]);
    let emb = pack.companion("emb").unwrap();
    assert_eq!(
        (emb.descr(), emb.shape(), emb.row_bytes()),
        ("'<f4'", &[2u64][..], 8)
    );
    for i in [0u64, 999, 1000, 1500, 2239] {
        assert_eq!(emb.values::<f32>(i).unwrap(), [i as f32, -(i as f32)]);
    }
    assert_eq!(emb.shard_bytes(2).unwrap().len(), 240 * 8);
    assert!(
        emb.values::<f64>(0)
            .unwrap_err()
            .to_string()
            .contains("not f64 values")
    );
    assert!(emb.row(2240).is_err());
    let tag = pack.companion("tag").unwrap();
    assert_eq!(tag.field_names(), ["id", "w"]);
    assert_eq!(tag.field_values::<i64>(1500, "id").unwrap(), [1500]);
    assert_eq!(tag.field_values::<f32>(3, "w").unwrap(), [0.5]);
    let e = tag.field_values::<f32>(3, "x").unwrap_err().to_string();
    assert!(e.contains("no field \"x\" (its fields: id, w)"), "{e}");
    let e = pack.companion("bad").unwrap_err().to_string();
    assert!(
        e.contains("does not line up") && e.contains("steps-00001.npy has no bad-00001.npy"),
        "{e}"
    );
}

#[test]
fn open_refuses_what_is_not_a_loader_ready_pack_naming_the_file() {
    let t = tempfile::tempdir().unwrap();
    let e = Pack::open(fixture("raw")).unwrap_err().to_string();
    assert!(
        e.contains("is not a pack") && e.contains("raw self-play logs"),
        "{e}"
    );

    // A legacy 46-byte pack is not refused: it reads as the full pack it converts to.
    let legacy = packed(t.path(), "legacy", &[]);
    let full = Pack::open(&legacy).unwrap();
    let rows: Vec<[u8; 48]> = full.steps().map(|s| *s.as_bytes()).collect();
    drop(full);
    make_legacy_pack(&legacy);
    let old = Pack::open(&legacy).unwrap();
    let read: Vec<[u8; 48]> = old.steps().map(|s| *s.as_bytes()).collect();
    assert!(
        read == rows,
        "a legacy pack reads as the pack it was made from"
    );
    assert_eq!(old.run(3).unwrap().len(), full_run_len(&legacy, 3));

    // A shard cut short: its header promises more.
    let cut = packed(t.path(), "cut", &["--shard-rows", "1000"]);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(cut.join("steps-00001.npy"))
        .unwrap();
    f.set_len(384 + 48 * 10).unwrap();
    let e = format!("{:#}", Pack::open(&cut).unwrap_err());
    assert!(e.contains("steps-00001.npy: file is 864 bytes"), "{e}");

    // metadata.db disagrees with the shards.
    let runs = packed(t.path(), "runs", &[]);
    rusqlite::Connection::open(runs.join("metadata.db"))
        .unwrap()
        .execute("UPDATE runs SET steps = steps + 1 WHERE id = 3", [])
        .unwrap();
    let e = format!("{:#}", Pack::open(&runs).unwrap_err());
    assert!(
        e.contains("is not a valid pack: Σ runs.steps = rows: Σ runs.steps is 2241, the shards hold 2240 rows"),
        "{e}"
    );
}

#[test]
fn verify_checks_every_byte_and_names_the_file() {
    let t = tempfile::tempdir().unwrap();
    let p = packed(t.path(), "p", &["--shard-rows", "1000"]);
    Pack::open(&p).unwrap().verify().unwrap();
    // One flipped bit in a branch EV: the header and sizes are fine, so open succeeds, and
    // only reading the rows (checksums) finds it.
    let shard = p.join("steps-00002.npy");
    let mut bytes = std::fs::read(&shard).unwrap();
    bytes[384 + 48 * 5 + 33] ^= 1;
    std::fs::write(&shard, bytes).unwrap();
    let pack = Pack::open(&p).unwrap();
    let e = pack.verify().unwrap_err().to_string();
    assert!(e.contains("is not valid"), "{e}");
    assert!(
        e.contains("shard checksums: steps-00002.npy: crc32c recorded"),
        "{e}"
    );
    // validate says the same.
    let out = run(&["validate", s(&p)]);
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn a_shuffled_pack_reads_by_row_but_has_no_runs() {
    let t = tempfile::tempdir().unwrap();
    let p = packed(t.path(), "p", &[]);
    let sh = t.path().join("sh");
    run_ok(&["shuffle", s(&p), "--output", s(&sh), "--quiet"]);
    let pack = Pack::open(&sh).unwrap();
    assert!(pack.is_shuffled());
    let mut ours: Vec<(u32, u32)> = pack.steps().map(|s| (s.run_id(), s.step_index())).collect();
    let mut theirs: Vec<(u32, u32)> = Pack::open(&p)
        .unwrap()
        .steps()
        .map(|s| (s.run_id(), s.step_index()))
        .collect();
    assert_ne!(ours, theirs, "shuffled");
    ours.sort();
    theirs.sort();
    assert_eq!(ours, theirs);
    let e = pack.run(0).unwrap_err().to_string();
    assert!(e.contains("is shuffled"), "{e}");
    assert!(pack.runs().is_err());
    assert_eq!(pack.select("depth = 6").unwrap().len(), 5);
}

#[test]
fn runs_are_found_without_a_run_index_as_in_a_reference_pack() {
    let t = tempfile::tempdir().unwrap();
    let p = packed(t.path(), "p", &["--shard-rows", "300"]);
    let before: Vec<(u32, u64, u64)> = {
        let pack = Pack::open(&p).unwrap();
        pack.runs()
            .unwrap()
            .map(|r| r.map(|r| (r.id(), r.first_row(), r.len())).unwrap())
            .collect()
    };
    rusqlite::Connection::open(p.join("metadata.db"))
        .unwrap()
        .execute_batch("DROP TABLE run_index")
        .unwrap();
    let pack = Pack::open(&p).unwrap();
    let after: Vec<(u32, u64, u64)> = pack
        .runs()
        .unwrap()
        .map(|r| r.map(|r| (r.id(), r.first_row(), r.len())).unwrap())
        .collect();
    assert_eq!(after, before);
    let run = pack.run(4).unwrap();
    assert_eq!((run.first_row(), run.len()), (before[4].1, before[4].2));
    assert!(run.steps().all(|s| s.run_id() == 4));
    // Without an index, runs.steps that misplace a run (their sum still right) are caught.
    rusqlite::Connection::open(p.join("metadata.db"))
        .unwrap()
        .execute_batch(
            "UPDATE runs SET steps = steps + 1 WHERE id = 1; UPDATE runs SET steps = steps - 1 WHERE id = 2;",
        )
        .unwrap();
    let pack = Pack::open(&p).unwrap();
    let listed: Vec<String> = pack
        .runs()
        .unwrap()
        .filter_map(|r| r.err().map(|e| e.to_string()))
        .collect();
    assert!(
        listed[0].contains("belongs to run 2, but metadata.db places run 1 there"),
        "{listed:?}"
    );
    let e = format!("{:#}", pack.run(2).unwrap_err());
    assert!(
        e.contains("its rows are not where the runs table places run 2"),
        "{e}"
    );
    // A run index pointing at another run's rows is refused, naming the pack.
    let q = packed(t.path(), "q", &[]);
    rusqlite::Connection::open(q.join("metadata.db"))
        .unwrap()
        .execute(
            "UPDATE run_index SET global_row = 0, row_offset = 0 WHERE run_id = 5",
            [],
        )
        .unwrap();
    let pack = Pack::open(&q).unwrap();
    let e = pack.run(5).unwrap_err().to_string();
    assert!(
        e.contains("global row 0 belongs to run 0, but metadata.db places run 5 there"),
        "{e}"
    );
    assert!(pack.runs().unwrap().any(|r| r.is_err()));
}

#[test]
fn a_pack_is_shared_between_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Pack>();
    let t = tempfile::tempdir().unwrap();
    let p = packed(t.path(), "p", &["--shard-rows", "500"]);
    let pack = Pack::open(&p).unwrap();
    let whole: u64 = pack.steps().map(|s| u64::from(s.step_index())).sum();
    let halves: u64 = std::thread::scope(|scope| {
        let (a, b) = (
            scope.spawn(|| {
                pack.steps_in(0..1000)
                    .map(|s| u64::from(s.step_index()))
                    .sum::<u64>()
            }),
            scope.spawn(|| {
                pack.steps_in(1000..u64::MAX)
                    .map(|s| u64::from(s.step_index()))
                    .sum::<u64>()
            }),
        );
        a.join().unwrap() + b.join().unwrap()
    });
    assert_eq!(halves, whole);
}

/// Run `id`'s steps as the pack's runs table counts them.
fn full_run_len(pack: &std::path::Path, id: i64) -> u64 {
    rusqlite::Connection::open(pack.join("metadata.db"))
        .unwrap()
        .query_row("SELECT steps FROM runs WHERE id = ?", [id], |r| {
            r.get::<_, i64>(0)
        })
        .unwrap() as u64
}
