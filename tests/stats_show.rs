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

/// Runs the binary, asserting it fails; its stderr.
fn run_fails(args: &[&str]) -> String {
    let out = run(args);
    assert!(!out.status.success(), "{args:?} succeeded");
    stderr(&out)
}

/// `--where` restricts every figure to the runs it selects (checked against sqlite3 and the
/// shard bytes); runs are broken down by depth; the EVs of legal moves are described per
/// valuation type, exactly in count, min, max and mean, and the quartiles within 1%.
#[test]
fn stats_where_depths_and_legal_evs_match_the_rows() {
    let t = tempfile::tempdir().unwrap();
    let pack = fixture_pack(t.path(), "p", &["--shard-rows", "300"]);
    let names: Vec<String> =
        serde_json::from_str(&std::fs::read_to_string(pack.join("valuation_types.json")).unwrap())
            .unwrap();
    let conn = db(&pack);
    let depth_of: BTreeMap<u32, i64> = conn
        .prepare("SELECT run_id, depth FROM run_details")
        .unwrap()
        .query_map([], |r| Ok((r.get::<_, u32>(0)?, r.get::<_, i64>(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let rows = read_rows(&pack);
    let run_of = |r: &[u8; 48]| u32::from_le_bytes(r[..4].try_into().unwrap());

    for (expr, depth) in [
        (None, None),
        (Some("depth = 7"), Some(7)),
        (Some("depth = 6 AND max_score > 5000"), None),
    ] {
        let st = match expr {
            Some(e) => stats_json(&pack, &["--where", e]),
            None => stats_json(&pack, &[]),
        };
        let ids: Vec<u32> = match expr {
            Some(e) => conn
                .prepare(&format!(
                    "SELECT id FROM runs JOIN run_details ON run_id = id WHERE {e} ORDER BY id"
                ))
                .unwrap()
                .query_map([], |r| r.get(0))
                .unwrap()
                .map(Result::unwrap)
                .collect(),
            None => depth_of.keys().copied().collect(),
        };
        let mine: Vec<&[u8; 48]> = rows.iter().filter(|r| ids.contains(&run_of(r))).collect();
        assert_eq!(st["runs"], ids.len(), "{expr:?}");
        assert_eq!(st["rows"], mine.len(), "{expr:?}");
        assert_eq!(st["where"].as_str(), expr);
        let mut moves = [0u64; 4];
        for r in &mine {
            moves[r[22] as usize] += 1;
        }
        assert_eq!(st["moves"]["up"], moves[0], "{expr:?}");
        assert_eq!(st["moves"]["right"], moves[3], "{expr:?}");

        // Runs by depth: every depth of the selected runs, with its runs and rows.
        let mut by_depth: BTreeMap<i64, (u64, u64)> = BTreeMap::new();
        for id in &ids {
            by_depth.entry(depth_of[id]).or_default().0 += 1;
        }
        for r in &mine {
            by_depth.get_mut(&depth_of[&run_of(r)]).unwrap().1 += 1;
        }
        let got: BTreeMap<i64, (u64, u64)> = st["depths"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| {
                let key = d["depth"].as_i64().unwrap();
                (
                    key,
                    (d["runs"].as_u64().unwrap(), d["rows"].as_u64().unwrap()),
                )
            })
            .collect();
        assert_eq!(got, by_depth, "{expr:?}");
        if let Some(d) = depth {
            assert_eq!(got.keys().copied().collect::<Vec<_>>(), vec![d]);
        }

        // EVs of legal moves per valuation type.
        let mut evs: BTreeMap<String, Vec<f64>> = BTreeMap::new();
        for r in &mine {
            for k in 0..4 {
                if r[24] & (1 << k) != 0 {
                    let at = 32 + 4 * k;
                    let v = f32::from_le_bytes(r[at..at + 4].try_into().unwrap());
                    evs.entry(names[r[23] as usize].clone())
                        .or_default()
                        .push(f64::from(v));
                }
            }
        }
        let got = st["ev_legal_moves"].as_object().unwrap();
        assert_eq!(
            got.keys().collect::<Vec<_>>(),
            evs.keys().collect::<Vec<_>>(),
            "{expr:?}"
        );
        for (name, mut values) in evs {
            values.sort_by(f64::total_cmp);
            let g = &got[&name];
            assert_eq!(g["evs"], values.len(), "{name}");
            // EVs are float32: compared as such (JSON's f64 text may be an ulp off in f64).
            let as_f32 = |v: &Value| v.as_f64().unwrap() as f32;
            assert_eq!(as_f32(&g["min"]), values[0] as f32, "{name}");
            assert_eq!(as_f32(&g["max"]), *values.last().unwrap() as f32, "{name}");
            let mean = values.iter().sum::<f64>() / values.len() as f64;
            assert!(
                (g["mean"].as_f64().unwrap() - mean).abs() <= 1e-9 * mean.abs().max(1.0),
                "{name}"
            );
            for (key, q) in [("p25", 0.25), ("median", 0.5), ("p75", 0.75)] {
                // Within 1% of a value between the two order statistics around the quantile.
                let pos = q * (values.len() - 1) as f64;
                let (lo, hi) = (values[pos.floor() as usize], values[pos.ceil() as usize]);
                let v = g[key].as_f64().unwrap();
                let slack = 0.01 * lo.abs().max(hi.abs());
                assert!(
                    v >= lo - slack && v <= hi + slack,
                    "{name} {key}: {v} not in [{lo}, {hi}]"
                );
            }
        }
    }

    // A selection of nothing, or a bad column, is an error that says so.
    let err = run_fails(&["stats", s(&pack), "--where", "depth = 99"]);
    assert!(err.contains("selects no runs"), "{err}");
    let human = run_ok(&["stats", s(&pack), "--where", "depth = 7"]);
    assert!(human.contains("where     depth = 7"), "{human}");
    assert!(human.contains("Runs by depth"), "{human}");
    assert!(human.contains("EVs of legal moves"), "{human}");
}

/// `show --last N` shows the end of a game without knowing its length.
#[test]
fn show_last_shows_the_end_of_the_run() {
    let t = tempfile::tempdir().unwrap();
    let pack = fixture_pack(t.path(), "p", &["--shard-rows", "800"]);
    let rows = read_rows(&pack);
    let steps: Vec<u64> = rows
        .iter()
        .filter(|r| u32::from_le_bytes(r[..4].try_into().unwrap()) == 3)
        .map(|r| u64::from(u32::from_le_bytes(r[4..8].try_into().unwrap())))
        .collect();
    let v = show_json(&pack, &["--run", "3", "--last", "5"]);
    let got: Vec<u64> = v["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["step_index"].as_u64().unwrap())
        .collect();
    assert_eq!(got, steps[steps.len() - 5..]);
    assert!(v["next_from"].is_null());
    let page = show(&pack, &["--run", "3", "--last", "2"]);
    assert!(page.contains("end of run 3"), "{page}");
    // More than the run holds: the whole run.
    let v = show_json(&pack, &["--run", "3", "--last", "100000"]);
    assert_eq!(v["steps"].as_array().unwrap().len(), steps.len());
    let err = run_fails(&["show", s(&pack), "--run", "3", "--last", "5", "--from", "2"]);
    assert!(err.contains("--last"), "{err}");
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
            "pack_id",
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

/// Tuple rows log `0.000000` as a legal move's real value; when a quarter of the EVs are 0, the
/// lower quartile is exactly 0, in JSON and in the table (it once printed `8.555e-41`).
#[test]
fn stats_quartile_among_zero_evs_is_zero() {
    let t = tempfile::tempdir().unwrap();
    let raw = t.path().join("raw");
    std::fs::create_dir_all(&raw).unwrap();
    // A 2 in the top-left corner: up and left are illegal, right and down legal. Rows as the
    // current logger writes them.
    let mut rows = String::new();
    for i in 0..40 {
        rows += &format!(
            "{{\"seed\":5,\"step_index\":{i},\"move\":\"down\",\"valuation_type\":\"tuple11\",\"board\":[1,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0],\"branch_evs\":{{\"up\":null,\"left\":null,\"right\":0.000000,\"down\":0.{:06}}}{}}}\n",
            500_000 + i * 1000,
            common::logger::unsearched()
        );
    }
    write_gz(&raw.join("g.jsonl.gz"), rows.as_bytes());
    std::fs::write(
        raw.join("g.meta.json"),
        r#"{"seed":5,"num_moves":40,"score":0,"max_tile":2}"#,
    )
    .unwrap();
    let pack_dir = t.path().join("p");
    pack(&raw, &pack_dir, &[]);
    let st = stats_json(&pack_dir, &[]);
    let evs = &st["ev_legal_moves"]["tuple11"];
    assert_eq!(evs["evs"], 80);
    assert_eq!(evs["p25"].as_f64(), Some(0.0), "{evs}");
    assert_eq!(evs["min"].as_f64(), Some(0.0), "{evs}");
    let human = run_ok(&["stats", s(&pack_dir)]);
    let line = human
        .lines()
        .find(|l| l.trim_start().starts_with("tuple11") && l.contains("80"))
        .unwrap_or_else(|| panic!("no tuple11 EV line in\n{human}"));
    assert!(!line.contains("e-"), "{line}");
    let cells: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(cells[2..4], ["0", "0"], "min and p25 of {line}");
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

    // A pack whose metadata.db lacks the run index table has it rebuilt from the runs table
    // and the rows; one whose table lacks the run is refused.
    let no_index = t.path().join("no_index");
    copy_tree(&pack, &no_index);
    rusqlite::Connection::open(no_index.join("metadata.db"))
        .unwrap()
        .execute_batch("DROP TABLE run_index;")
        .unwrap();
    let args = ["--run", "3", "--limit", "1000"];
    assert_eq!(show_json(&no_index, &args), show_json(&pack, &args));
    let partial = t.path().join("partial_index");
    copy_tree(&pack, &partial);
    rusqlite::Connection::open(partial.join("metadata.db"))
        .unwrap()
        .execute_batch("DELETE FROM run_index WHERE run_id = 3;")
        .unwrap();
    let out = run(&["show", s(&partial), "--run", "3"]);
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

/// `show` takes its run as a number, never as text that reaches SQL: an injection attempt is
/// a usage error, the pack is untouched, and the run shown is exactly the one asked for.
#[test]
fn show_takes_a_run_id_not_sql() {
    let t = tempfile::tempdir().unwrap();
    let pack = fixture_pack(t.path(), "p", &[]);
    let before = pack_bytes(&pack);
    for text in [
        "1 OR 1=1",
        "1; DROP TABLE runs",
        "(SELECT id FROM runs)",
        "-1",
    ] {
        let out = run(&["show", s(&pack), "--run", text]);
        assert_eq!(out.status.code(), Some(2), "{text}: {}", stderr(&out));
        assert!(stderr(&out).contains("--run"), "{}", stderr(&out));
    }
    assert_eq!(pack_bytes(&pack), before);
    let page: serde_json::Value =
        serde_json::from_str(&show(&pack, &["--run", "7", "--json"])).unwrap();
    assert_eq!(page["run"]["id"], 7);
    let seeds: Vec<i64> = runs_table(&pack).iter().map(|r| r.1).collect();
    assert_eq!(page["run"]["seed"], seeds[7]);
}
