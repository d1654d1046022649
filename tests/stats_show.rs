//! `stats` and `show` end to end on the fixture drop: every stats figure is recomputed here
//! independently (from fixtures/raw_expected.json, metadata.db via rusqlite, and the shard
//! bytes); show is checked against a golden page, pages through a run, follows a run across a
//! shard boundary, and refuses unknown runs and shuffled packs with exit 1.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::*;
use serde_json::Value;

/// The fixture drop packed into `t/name` with extra pack arguments.
fn fixture_pack(t: &Path, name: &str, extra: &[&str]) -> PathBuf {
    let out = t.join(name);
    pack(&fixture("raw"), &out, extra);
    out
}

fn expected() -> Value {
    let text = std::fs::read_to_string(fixture("raw_expected.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn stats_json(pack: &Path, extra: &[&str]) -> Value {
    let mut args = vec!["stats", s(pack), "--json"];
    args.extend_from_slice(extra);
    serde_json::from_str(&run_ok(&args)).expect("stats --json prints one JSON document")
}

fn show(pack: &Path, extra: &[&str]) -> String {
    let mut args = vec!["show", s(pack)];
    args.extend_from_slice(extra);
    run_ok(&args)
}

fn show_json(pack: &Path, extra: &[&str]) -> Value {
    let mut args = vec!["--json"];
    args.extend_from_slice(extra);
    serde_json::from_str(&show(pack, &args)).expect("show --json prints one JSON document")
}

/// NumPy's default (linear) quantile of sorted values.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    let pos = q * (sorted.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

#[test]
fn stats_counts_match_the_fixture_facts() {
    let t = tempfile::tempdir().unwrap();
    let pack = fixture_pack(t.path(), "p", &[]);
    let st = stats_json(&pack, &[]);
    let exp = expected();
    let runs = exp["run_list"].as_array().unwrap();

    assert_eq!(st["runs"], 10);
    assert_eq!(st["rows"], 2240);
    assert_eq!(st["rows_in_runs"], 2240);
    assert_eq!(st["shards"], 1);
    assert_eq!(
        st["bytes"],
        std::fs::metadata(pack.join("steps.npy")).unwrap().len()
    );
    assert_eq!(st["shuffled"], false);

    // Steps per run, from the fixture's row counts: 160 … 300, median (220 + 230) / 2.
    let mut steps: Vec<f64> = runs.iter().map(|r| r["rows"].as_f64().unwrap()).collect();
    steps.sort_by(f64::total_cmp);
    let spr = &st["steps_per_run"];
    assert_eq!(spr["min"], 160.0);
    assert_eq!(spr["max"], 300.0);
    assert_eq!(spr["median"], 225.0);
    assert_eq!(spr["mean"], 224.0);
    assert_eq!(spr["p25"].as_f64().unwrap(), quantile(&steps, 0.25));
    assert_eq!(spr["p75"].as_f64().unwrap(), quantile(&steps, 0.75));

    // Valuation types: the sum of the fixture's per-run counts, by name.
    let mut by_name: BTreeMap<String, u64> = BTreeMap::new();
    for r in runs {
        for (name, n) in r["valuation_type_rows"].as_object().unwrap() {
            *by_name.entry(name.clone()).or_default() += n.as_u64().unwrap();
        }
    }
    let got: BTreeMap<String, u64> = st["valuation_types"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["name"].as_str().unwrap().to_string(),
                v["rows"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(got, by_name);
    let names: Vec<&str> = st["valuation_types"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        exp["valuation_types"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect::<Vec<_>>()
    );

    // Tiles reached, from the fixture's max_tile: all ten reach 256, one run reaches 65536.
    let tiles: Vec<i64> = runs
        .iter()
        .map(|r| r["max_tile"].as_i64().unwrap())
        .collect();
    let table = st["highest_tile"].as_array().unwrap();
    for tile in [2048i64, 4096, 8192, 16384, 32768, 65536] {
        let row = table
            .iter()
            .find(|r| r["tile"] == tile)
            .unwrap_or_else(|| panic!("no row for tile {tile}"));
        let reached = tiles.iter().filter(|&&m| m >= tile).count() as u64;
        let highest = tiles.iter().filter(|&&m| m == tile).count() as u64;
        assert_eq!(row["reached"], reached, "tile {tile}");
        assert_eq!(row["highest"], highest, "tile {tile}");
    }
    assert_eq!(
        table.iter().find(|r| r["tile"] == 256).unwrap()["reached"],
        10
    );
    assert_eq!(
        table.iter().find(|r| r["tile"] == 65536).unwrap()["reached"],
        1
    );

    // No findings in this drop, but the table exists.
    assert_eq!(st["findings"], serde_json::json!({}));
}

#[test]
fn stats_scores_match_the_runs_table() {
    let t = tempfile::tempdir().unwrap();
    let pack = fixture_pack(t.path(), "p", &[]);
    let st = stats_json(&pack, &[]);
    let scores: Vec<i64> = runs_table(&pack).iter().map(|r| r.3).collect();
    let mut sorted: Vec<f64> = scores.iter().map(|&v| v as f64).collect();
    sorted.sort_by(f64::total_cmp);
    let sc = &st["score"];
    assert_eq!(sc["min"], 2112.0);
    assert_eq!(sc["max"], 76384.0);
    assert_eq!(sc["median"].as_f64().unwrap(), quantile(&sorted, 0.5));
    assert_eq!(
        sc["mean"].as_f64().unwrap(),
        sorted.iter().sum::<f64>() / sorted.len() as f64
    );
    // Histogram: power-of-two bins from the lowest to the highest non-empty one.
    let bin_of = |v: i64| {
        let mut k = 0;
        while (2i64 << k) <= v {
            k += 1;
        }
        k
    };
    let mut want: BTreeMap<i64, u64> = BTreeMap::new();
    let (lo, hi) = (
        scores.iter().map(|&v| bin_of(v)).min().unwrap(),
        scores.iter().map(|&v| bin_of(v)).max().unwrap(),
    );
    for k in lo..=hi {
        want.insert(1 << k, 0);
    }
    for &v in &scores {
        *want.get_mut(&(1 << bin_of(v))).unwrap() += 1;
    }
    let got: BTreeMap<i64, u64> = sc["histogram"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            assert_eq!(
                b["to"].as_i64().unwrap(),
                2 * b["from"].as_i64().unwrap() - 1
            );
            (b["from"].as_i64().unwrap(), b["runs"].as_u64().unwrap())
        })
        .collect();
    assert_eq!(got, want);
    assert_eq!(got[&2048], 7);
    assert_eq!(got[&65536], 1);
}

#[test]
fn stats_row_pass_matches_the_shard_bytes() {
    let t = tempfile::tempdir().unwrap();
    let pack = fixture_pack(t.path(), "p", &[]);
    let st = stats_json(&pack, &[]);
    let rows = read_rows(&pack);
    let names: Vec<String> =
        serde_json::from_str(&std::fs::read_to_string(pack.join("valuation_types.json")).unwrap())
            .unwrap();

    // Moves by direction.
    let mut moves = [0u64; 4];
    for r in &rows {
        moves[r[22] as usize] += 1;
    }
    for (k, name) in ["up", "down", "left", "right"].iter().enumerate() {
        assert_eq!(st["moves"][name], moves[k], "{name}");
    }
    assert_eq!(st["moves"]["invalid"], 0);

    // Phase of game: rows per (max_rank, valuation type).
    let mut phases: BTreeMap<u64, BTreeMap<String, u64>> = BTreeMap::new();
    for r in &rows {
        *phases
            .entry(u64::from(r[25]))
            .or_default()
            .entry(names[r[23] as usize].clone())
            .or_default() += 1;
    }
    let got: BTreeMap<u64, BTreeMap<String, u64>> = st["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let counts: BTreeMap<String, u64> =
                serde_json::from_value(p["rows_by_type"].clone()).unwrap();
            assert_eq!(p["rows"], counts.values().sum::<u64>());
            assert_eq!(p["tile"], 1u64 << p["max_rank"].as_u64().unwrap());
            for (name, n) in &counts {
                let share = p["share_by_type"][name].as_f64().unwrap();
                assert!((share - *n as f64 / p["rows"].as_f64().unwrap()).abs() < 1e-12);
            }
            (p["max_rank"].as_u64().unwrap(), counts)
        })
        .collect();
    assert_eq!(got, phases);
    // The 65536 run: 239 rows at max_rank 16.
    assert_eq!(got[&16].values().sum::<u64>(), 239);
}

#[test]
fn stats_is_the_same_for_any_sharding_and_worker_count() {
    let t = tempfile::tempdir().unwrap();
    let single = fixture_pack(t.path(), "single", &[]);
    let sharded = fixture_pack(t.path(), "sharded", &["--shard-rows", "100"]);
    let figures = |v: Value| {
        let mut m = v.as_object().unwrap().clone();
        for k in [
            "pack",
            "shards",
            "bytes",
            "metadata_bytes",
            "workers",
            "elapsed_s",
        ] {
            m.remove(k);
        }
        m
    };
    let a = stats_json(&single, &["--workers", "1"]);
    let b = stats_json(&sharded, &["--workers", "3"]);
    assert_eq!(b["shards"], 23);
    assert_eq!(figures(a), figures(b));
}

#[test]
fn stats_reports_findings_recorded_at_pack_time() {
    let t = tempfile::tempdir().unwrap();
    let pack = t.path().join("f");
    common::pack(&fixture("findings"), &pack, &[]);
    let exp: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("findings/expected.json")).unwrap())
            .unwrap();
    let st = stats_json(&pack, &[]);
    let found = st["findings"].as_object().unwrap();
    for (kind, n) in exp["counts"].as_object().unwrap() {
        if n.as_u64().unwrap() > 0 {
            assert_eq!(&found[kind], n, "{kind}");
        }
    }
    let human = run_ok(&["stats", s(&pack)]);
    assert!(human.contains("step_index_gap"), "{human}");
}

#[test]
fn stats_human_output_fits_80_columns() {
    let t = tempfile::tempdir().unwrap();
    let pack = fixture_pack(t.path(), "p", &[]);
    let out = run_ok(&["stats", s(&pack)]);
    for line in out.lines().filter(|l| !l.starts_with("pack ")) {
        assert!(line.chars().count() <= 80, "too wide: {line:?}");
        assert_eq!(line, line.trim_end(), "trailing spaces: {line:?}");
    }
    for needle in ["2,240", "65536", "tuple12", "search", "left", "median"] {
        assert!(out.contains(needle), "no {needle:?} in\n{out}");
    }
}

// ---------------------------------------------------------------------------------------------
// show

/// Show's output with the pack's temporary path replaced, for comparisons.
fn portable(out: &str, pack: &Path) -> String {
    out.replace(s(pack), "PACK")
}

/// The steps part of show's human output (everything after the run facts).
fn steps_part(out: &str) -> &str {
    &out[out.find("\n\n").expect("a blank line after the facts")..]
}

#[test]
fn show_matches_the_golden_page() {
    let t = tempfile::tempdir().unwrap();
    let pack = fixture_pack(t.path(), "p", &[]);
    let out = portable(&show(&pack, &["--run", "3"]), &pack);
    let golden = repo().join("tests/golden/show_run3.txt");
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&golden, &out).unwrap();
    }
    let want = std::fs::read_to_string(&golden).unwrap();
    assert_eq!(
        out, want,
        "show output changed; check it by eye, then UPDATE_GOLDEN=1"
    );
    assert!(out.contains("65536"));
    assert!(out.contains("illegal"));
    assert!(out.contains("--from 20"));
}

#[test]
fn show_prints_real_tiles_moves_and_evs() {
    let t = tempfile::tempdir().unwrap();
    let pack = fixture_pack(t.path(), "p", &[]);
    let rows = read_rows(&pack);
    let v = show_json(&pack, &["--run", "3", "--limit", "240"]);
    let steps = v["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 240);
    assert_eq!(v["next_from"], Value::Null);
    let run3: Vec<&[u8; 48]> = rows
        .iter()
        .filter(|r| u32::from_le_bytes(r[0..4].try_into().unwrap()) == 3)
        .collect();
    let moves = ["up", "down", "left", "right"];
    let mut with_65536 = 0;
    for (step, row) in steps.iter().zip(run3) {
        let board = u64::from_le_bytes(row[8..16].try_into().unwrap());
        let mask = u16::from_le_bytes([row[20], row[21]]);
        let tiles: Vec<u64> = (0..16)
            .map(|i| {
                let e = if mask >> i & 1 == 1 {
                    16
                } else {
                    (board >> (60 - 4 * i)) & 0xf
                };
                if e == 0 { 0 } else { 1 << e }
            })
            .collect();
        let shown: Vec<u64> = step["board"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|r| r.as_array().unwrap().iter().map(|c| c.as_u64().unwrap()))
            .collect();
        assert_eq!(shown, tiles);
        with_65536 += usize::from(tiles.contains(&65536));
        assert_eq!(
            step["step_index"],
            u32::from_le_bytes(row[4..8].try_into().unwrap())
        );
        assert_eq!(step["move"], moves[row[22] as usize]);
        for (k, m) in moves.iter().enumerate() {
            let ev = f32::from_le_bytes(row[32 + 4 * k..36 + 4 * k].try_into().unwrap());
            assert_eq!(step["branch_evs"][m].as_f64().unwrap() as f32, ev);
            assert_eq!(step["legal"][m], row[24] >> k & 1 == 1);
        }
    }
    assert_eq!(with_65536, 239);
}

#[test]
fn show_pages_through_a_run() {
    let t = tempfile::tempdir().unwrap();
    let pack = fixture_pack(t.path(), "p", &[]);
    let page = show(&pack, &["--run", "0", "--from", "20", "--limit", "20"]);
    assert!(page.contains("\nstep 20 "), "{page}");
    assert!(page.contains("\nstep 39 "), "{page}");
    assert!(!page.contains("\nstep 40 "), "{page}");
    assert!(page.contains("--run 0 --from 40 --limit 20"), "{page}");

    // Following next_from visits every step of the 300-row run exactly once.
    let mut seen = Vec::new();
    let mut from = Some(0u64);
    while let Some(f) = from {
        let v = show_json(
            &pack,
            &["--run", "0", "--from", &f.to_string(), "--limit", "7"],
        );
        seen.extend(
            v["steps"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["step_index"].as_u64().unwrap()),
        );
        from = v["next_from"].as_u64();
    }
    assert_eq!(seen, (0..300).collect::<Vec<u64>>());

    // The last page says so; past the end there is nothing to show.
    let last = show(&pack, &["--run", "0", "--from", "295"]);
    assert!(last.contains("end of run 0"), "{last}");
    let past = show(&pack, &["--run", "0", "--from", "1000"]);
    assert!(past.contains("its last step is 299"), "{past}");
}

#[test]
fn show_from_finds_the_next_step_after_a_gap() {
    let t = tempfile::tempdir().unwrap();
    let pack = t.path().join("f");
    common::pack(&fixture("findings"), &pack, &[]);
    // Run 3 (f3_step_index_gap) has steps 0, 1, 2, 5, 6, …: --from 3 starts at 5.
    let v = show_json(&pack, &["--run", "3", "--from", "3", "--limit", "2"]);
    let steps: Vec<u64> = v["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["step_index"].as_u64().unwrap())
        .collect();
    assert_eq!(steps, [5, 6]);
    assert_eq!(v["next_from"], 7);
    // Run 5 (f5_empty_run) has no rows.
    assert!(show(&pack, &["--run", "5"]).contains("run 5 has no rows"));
}

#[test]
fn show_follows_a_run_across_shards() {
    let t = tempfile::tempdir().unwrap();
    let single = fixture_pack(t.path(), "single", &[]);
    let sharded = fixture_pack(t.path(), "sharded", &["--shard-rows", "100"]);
    // Run 3 is global rows 780..1020: steps-00007.npy row 80 through steps-00010.npy row 19.
    let whole = show(&sharded, &["--run", "3", "--limit", "240"]);
    assert!(
        whole.contains("steps-00007.npy row 80, continuing into 3 more shard(s)"),
        "{whole}"
    );
    assert_eq!(
        steps_part(&whole),
        steps_part(&show(&single, &["--run", "3", "--limit", "240"]))
    );
    // A page that itself crosses a boundary (rows 15..25 of the run = global 795..805).
    let args = ["--run", "3", "--from", "15", "--limit", "10"];
    let a = portable(&show(&single, &args), &single);
    let b = portable(&show(&sharded, &args), &sharded);
    assert_eq!(steps_part(&a), steps_part(&b));
    assert_eq!(
        show_json(&single, &args)["steps"],
        show_json(&sharded, &args)["steps"]
    );
}

#[test]
fn show_and_stats_read_legacy_packed_shards() {
    let t = tempfile::tempdir().unwrap();
    let spec = fixture_pack(t.path(), "spec", &["--shard-rows", "1000"]);
    let legacy = fixture_pack(t.path(), "legacy", &["--shard-rows", "1000"]);
    make_legacy_pack(&legacy);
    let args = ["--run", "3", "--from", "210", "--limit", "30"];
    assert_eq!(
        show_json(&spec, &args)["steps"],
        show_json(&legacy, &args)["steps"]
    );
    let (a, b) = (stats_json(&spec, &[]), stats_json(&legacy, &[]));
    for k in ["rows", "valuation_types", "phases", "moves"] {
        assert_eq!(a[k], b[k], "{k}");
    }
}

#[test]
fn show_refuses_unknown_runs_and_shuffled_packs() {
    let t = tempfile::tempdir().unwrap();
    let pack = fixture_pack(t.path(), "p", &[]);

    let out = run(&["show", s(&pack), "--run", "99"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("run 99 is not in"),
        "{}",
        stderr(&out)
    );
    assert!(stderr(&out).contains("ids 0–9"), "{}", stderr(&out));

    // A shuffled pack: session says so and there is no run index.
    let shuffled = t.path().join("shuffled");
    copy_tree(&pack, &shuffled);
    let conn = rusqlite::Connection::open(shuffled.join("metadata.db")).unwrap();
    conn.execute_batch(
        "UPDATE session SET meta_value = 'true' WHERE meta_key = 'shuffled'; DROP TABLE run_index;",
    )
    .unwrap();
    drop(conn);
    let out = run(&["show", s(&shuffled), "--run", "3"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("show needs an unshuffled pack"),
        "{}",
        stderr(&out)
    );
    // stats still works on it.
    assert_eq!(stats_json(&shuffled, &[])["shuffled"], true);

    // A pack whose metadata.db simply lacks the run index.
    let no_index = t.path().join("no_index");
    copy_tree(&pack, &no_index);
    rusqlite::Connection::open(no_index.join("metadata.db"))
        .unwrap()
        .execute_batch("DROP TABLE run_index;")
        .unwrap();
    let out = run(&["show", s(&no_index), "--run", "3"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("run_index"), "{}", stderr(&out));

    // Not a pack at all.
    for cmd in [
        &["show", s(t.path()), "--run", "0"][..],
        &["stats", s(t.path())][..],
    ] {
        let out = run(cmd);
        assert_eq!(out.status.code(), Some(1), "{cmd:?}");
        assert!(stderr(&out).contains("no metadata.db"), "{}", stderr(&out));
    }
}
