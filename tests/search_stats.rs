//! `pack --search-stats`: the current logger's `search` object of every row kept, exactly, as
//! the row-aligned companion family `search`, and carried wherever the rows go (merge, shuffle,
//! export, pack --update, the Python reader), shown by `stats` and `show`; without the flag,
//! the pack is unchanged and the rows whose statistics were dropped are counted.
//!
//! The drop is written here, row by row, with the statistics each row should yield: depths 2,
//! 3, 6 and 7, counts that grow with the depth (up to 2^64 − 1), tuple rows with `"used":false`
//! and null counters, and rows the fast paths leave to the general parser (spacing, members in
//! another order, `"search":null`, no `search` at all).

mod common;

use std::collections::HashMap;
use std::path::Path;

use common::*;
use serde_json::Value;

const FIELDS: [&str; 14] = common::logger::SEARCH_KEYS;

/// What one row's statistics should read back as: `used`, then the 14 fields (counts as
/// integers, the hit rate as the f32 the logged text rounds to, widened).
#[derive(Debug, Clone, PartialEq)]
struct Expected {
    used: bool,
    values: Vec<Value>,
}

/// (run id, step_index) → the row's expected statistics.
type Truth = HashMap<(u64, u64), Expected>;

/// The runs of the drop: (depth, rows). Run ids follow the sorted file names.
const RUNS: [(u64, u64); 6] = [(2, 40), (3, 55), (6, 70), (7, 85), (2, 33), (6, 61)];

/// A row's statistics: none on every 7th row (a tuple row), else counts that grow with the
/// depth; one depth-7 row counts 2^64 − 1 nodes.
fn stats_of(depth: u64, run: u64, i: u64) -> Option<(Vec<u64>, String)> {
    if i % 7 == 3 {
        return None;
    }
    let total = if depth == 7 && i == 5 {
        u64::MAX
    } else {
        (i + 1) * depth.pow(5) + run
    };
    let mut counts: Vec<u64> = (0..13u64).map(|k| total / (k + 1) + k).collect();
    counts[0] = total;
    counts[12] = depth.min(i); // max_move_depth
    let rate = format!("{:.6}", ((i * 3733 + run * 17) % 100_000) as f64 / 997.0);
    Some((counts, rate))
}

/// The `search` object as the logger writes it (or with members reordered and an unknown one).
fn search_json(stats: &Option<(Vec<u64>, String)>, reordered: bool) -> String {
    let Some((counts, rate)) = stats else {
        let nulls: Vec<String> = FIELDS.iter().map(|f| format!("\"{f}\":null")).collect();
        return format!("{{\"used\":false,{}}}", nulls.join(","));
    };
    let mut members: Vec<String> = Vec::new();
    let mut c = counts.iter();
    for f in FIELDS {
        let v = if f == "cache_hit_rate" {
            rate.clone()
        } else {
            c.next().unwrap().to_string()
        };
        members.push(format!("\"{f}\":{v}"));
    }
    if reordered {
        members.reverse();
        members.insert(3, "\"extra\":[1,{\"total_nodes\":7}]".into());
        members.push("\"used\" : true".into());
    } else {
        members.insert(0, "\"used\":true".into());
    }
    format!("{{{}}}", members.join(","))
}

fn expected(stats: &Option<(Vec<u64>, String)>) -> Expected {
    match stats {
        None => Expected {
            used: false,
            values: (0..14)
                .map(|k| if k == 12 { 0.0.into() } else { 0.into() })
                .collect(),
        },
        Some((counts, rate)) => {
            let mut values: Vec<Value> = counts.iter().map(|&c| c.into()).collect();
            let rate = f64::from(rate.parse::<f64>().unwrap() as f32);
            values.insert(12, rate.into());
            Expected { used: true, values }
        }
    }
}

/// The folder of run `run` in the drop.
fn run_folder(run: u64) -> String {
    format!("r{run}_d{}", RUNS[run as usize].0)
}

/// Writes the drop into `dir`, and the statistics each row should give.
fn write_drop(dir: &Path) -> Truth {
    write_drop_of(dir, &RUNS, stats_of)
}

/// Writes a drop of `runs` (depth, rows) into `dir`, row `i` of run `run` with the statistics
/// `stats(depth, run, i)`, and the statistics each row should give.
fn write_drop_of(
    dir: &Path,
    runs: &[(u64, u64)],
    stats: impl Fn(u64, u64, u64) -> Option<(Vec<u64>, String)>,
) -> Truth {
    let mut truth = Truth::new();
    for (run, &(depth, rows)) in runs.iter().enumerate() {
        let run = run as u64;
        let base = format!(
            "depth{depth:02}_worker00_seed{:010}_game{run:06}",
            1000 + run
        );
        // One folder per run, named so that run ids follow the order of RUNS.
        let sub = dir.join(run_folder(run));
        std::fs::create_dir_all(&sub).unwrap();
        let mut text = String::new();
        for i in 0..rows {
            let stats = stats(depth, run, i);
            let board: Vec<String> = (0..16).map(|k| ((i + k) % 5).to_string()).collect();
            let vtype = if stats.is_some() { "search" } else { "tuple11" };
            let head = format!(
                "{{\"seed\":{},\"step_index\":{i},\"max_rank\":4,\"move\":\"up\",\"valuation_type\":\"{vtype}\",\"valuation\":0.500000,\"board\":[{}],\"branch_evs\":{{\"up\":0.500000,\"left\":null,\"right\":0.250000,\"down\":-1.000000}}",
                1000 + run,
                board.join(",")
            );
            // Run 5 holds the rows the fast paths leave to the general parser.
            let (line, stats) = match (run, i % 10) {
                (5, 1) => (
                    format!("{head}, \"search\" : {} }}", search_json(&stats, false)),
                    stats,
                ),
                (5, 2) => (
                    format!("{head},\"search\":{}}}", search_json(&stats, true)),
                    stats,
                ),
                (5, 4) => (format!("{head},\"search\":null}}"), None),
                (5, 6) => (format!("{head}}}"), None),
                _ => (
                    format!("{head},\"search\":{}}}", search_json(&stats, false)),
                    stats,
                ),
            };
            text.push_str(&line);
            text.push('\n');
            truth.insert((run, i), expected(&stats));
        }
        write_gz(&sub.join(format!("{base}.jsonl.gz")), text.as_bytes());
        std::fs::write(
            sub.join(format!("{base}.meta.json")),
            format!(
                "{{\"seed\":{},\"depth\":{depth},\"game_index\":{run},\"num_moves\":{rows},\"score\":1000,\"max_tile\":16,\"max_rank\":4,\"sum_tile\":30,\"seconds\":1.5}}",
                1000 + run
            ),
        )
        .unwrap();
    }
    truth
}

/// Rows whose statistics say `"used":true`.
fn used_rows(truth: &Truth) -> u64 {
    truth.values().filter(|e| e.used).count() as u64
}

/// The pack's `search` rows read by NumPy and by the Python reader, both checked against
/// `truth` row by row (found through each steps row's run_id and step_index); returns the
/// dtype's fields.
fn check_family(pack: &Path, truth: &Truth) -> Vec<Value> {
    let out: Value = serde_json::from_str(&python_ok("search_stats.py", &[s(pack)])).unwrap();
    for reader in ["numpy", "reader"] {
        let rows = out[reader].as_array().unwrap();
        assert_eq!(
            rows.len(),
            truth.len(),
            "{reader}: rows in {}",
            pack.display()
        );
        for row in rows {
            let r = row.as_array().unwrap();
            let key = (r[0].as_u64().unwrap(), r[1].as_u64().unwrap());
            let got = Expected {
                used: r[2].as_bool().unwrap(),
                values: r[3..].to_vec(),
            };
            let want = truth
                .get(&key)
                .unwrap_or_else(|| panic!("{reader}: run {} step {} unexpected", key.0, key.1));
            assert_eq!(
                as_f32_rate(got),
                as_f32_rate(want.clone()),
                "{reader}: run {} step {}",
                key.0,
                key.1
            );
        }
    }
    assert_eq!(out["itemsize"], 109);
    out["fields"].as_array().unwrap().clone()
}

/// The hit rate compared as the f32 it is (JSON parsers may differ in the last bit of the
/// f64 they read for one decimal text).
fn as_f32_rate(mut e: Expected) -> Expected {
    let rate = e.values[12].as_f64().unwrap() as f32;
    e.values[12] = f64::from(rate).into();
    e
}

/// Every `.npy` of a pack with its bytes.
fn arrays(pack: &Path) -> Vec<(String, Vec<u8>)> {
    files(pack, |n| n.ends_with(".npy"))
}

#[test]
fn search_statistics_are_kept_exactly_and_recorded() {
    let tmp = tempfile::tempdir().unwrap();
    let raw = tmp.path().join("raw");
    let truth = write_drop(&raw);
    let kept = tmp.path().join("kept");
    let plain = tmp.path().join("plain");
    pack(&raw, &kept, &["--search-stats", "--shard-rows", "100"]);
    pack(&raw, &plain, &["--shard-rows", "100"]);

    let fields = check_family(&kept, &truth);
    let mut want = vec![serde_json::json!(["used", "|b1"])];
    for f in FIELDS {
        let t = if f == "cache_hit_rate" { "<f4" } else { "<u8" };
        want.push(serde_json::json!([f, t]));
    }
    assert_eq!(
        fields, want,
        "the dtype: used, then the 14 fields in log order"
    );

    // The steps are the same bytes with or without the flag; only the family is added.
    let steps = |p: &Path| files(p, |n| n.starts_with("steps"));
    assert_eq!(steps(&kept), steps(&plain));
    assert!(arrays(&plain).iter().all(|(n, _)| n.starts_with("steps")));
    let search_files: Vec<String> = arrays(&kept)
        .into_iter()
        .map(|(n, _)| n)
        .filter(|n| n.starts_with("search"))
        .collect();
    assert_eq!(search_files.len(), steps(&kept).len());

    // metadata.db records the family file by file, with checksums validate checks.
    let conn = db(&kept);
    let records: Vec<(String, i64, String, String)> = conn
        .prepare("SELECT name, rows, file_name, shape FROM companions ORDER BY shard")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        records.iter().map(|r| r.2.clone()).collect::<Vec<_>>(),
        search_files
    );
    assert!(records.iter().all(|r| r.0 == "search" && r.3 == "[]"));
    assert_eq!(records.iter().map(|r| r.1).sum::<i64>(), truth.len() as i64);
    let out = run_ok(&["validate", "--deep", s(&kept)]);
    assert!(out.contains("VALID"), "{out}");

    // Without the flag, the session counts the rows whose statistics were dropped.
    assert_eq!(
        session_value(&plain, "search_rows_not_kept"),
        Some(used_rows(&truth).to_string())
    );
    assert_eq!(
        session_value(&kept, "search_rows_not_kept"),
        Some("0".into())
    );
    let text = run_ok(&["stats", s(&plain)]);
    assert!(
        text.contains(&format!(
            "Search statistics: not kept for {} rows (packed without --search-stats)",
            used_rows(&truth)
        )),
        "{text}"
    );
}

#[test]
fn merged_partitions_and_an_update_equal_one_pack_byte_for_byte() {
    let tmp = tempfile::tempdir().unwrap();
    let raw = tmp.path().join("raw");
    let truth = write_drop(&raw);
    let whole = tmp.path().join("whole");
    pack(&raw, &whole, &["--search-stats", "--shard-rows", "64"]);

    let parts: Vec<_> = (0..2)
        .map(|i| {
            let p = tmp.path().join(format!("part{i}"));
            let partition = format!("{i}/2");
            pack(
                &raw,
                &p,
                &[
                    "--search-stats",
                    "--shard-rows",
                    "64",
                    "--partition",
                    &partition,
                ],
            );
            p
        })
        .collect();
    let merged = tmp.path().join("merged");
    run_ok(&[
        "merge",
        "--input",
        s(&parts[0]),
        "--input",
        s(&parts[1]),
        "--output",
        s(&merged),
        "--shard-rows",
        "64",
        "--quiet",
    ]);
    assert_eq!(arrays(&merged), arrays(&whole), "merge of the partitions");
    check_family(&merged, &truth);

    // An update of the pack of the first depths' runs, with the rest of the drop.
    let first = tmp.path().join("first");
    for run in 0..2 {
        copy_tree(&raw.join(run_folder(run)), &first.join(run_folder(run)));
    }
    let updated = tmp.path().join("updated");
    pack(&first, &updated, &["--search-stats", "--shard-rows", "64"]);
    let before = arrays(&updated);
    let refused = run(&[
        "pack",
        "--input",
        s(&raw),
        "--output",
        s(&updated),
        "--update",
        "--quiet",
    ]);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    let message = stderr(&refused);
    assert!(
        message.contains(s(&updated)) && message.contains("(see --search-stats)"),
        "{message}"
    );
    assert_eq!(arrays(&updated), before, "a refused update writes nothing");
    pack(&raw, &updated, &["--update", "--search-stats"]);
    check_family(&updated, &truth);
    assert_eq!(arrays(&updated), arrays(&whole), "the updated pack");
    let out = run_ok(&["validate", "--deep", s(&updated)]);
    assert!(out.contains("VALID"), "{out}");
}

#[test]
fn an_update_must_agree_with_the_pack_on_search_statistics() {
    let tmp = tempfile::tempdir().unwrap();
    let raw = tmp.path().join("raw");
    let truth = write_drop(&raw);
    let first = tmp.path().join("first");
    copy_tree(&raw.join(run_folder(0)), &first.join(run_folder(0)));

    // A pack without the family cannot gain it: its rows would have none.
    let plain = tmp.path().join("plain");
    pack(&first, &plain, &["--shard-rows", "64"]);
    let before = arrays(&plain);
    let refused = run(&[
        "pack",
        "--input",
        s(&raw),
        "--output",
        s(&plain),
        "--update",
        "--search-stats",
        "--quiet",
    ]);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("was packed without search statistics"),
        "{}",
        stderr(&refused)
    );
    assert_eq!(arrays(&plain), before);
    // Updated without the flag, it counts the new rows' dropped statistics too.
    pack(&raw, &plain, &["--update"]);
    assert_eq!(
        session_value(&plain, "search_rows_not_kept"),
        Some(used_rows(&truth).to_string())
    );

    // The flag and --drop-companion search contradict each other; dropping alone works.
    let kept = tmp.path().join("kept");
    pack(&first, &kept, &["--search-stats", "--shard-rows", "64"]);
    let both = run(&[
        "pack",
        "--input",
        s(&raw),
        "--output",
        s(&kept),
        "--update",
        "--search-stats",
        "--drop-companion",
        "search",
        "--quiet",
    ]);
    assert_eq!(both.status.code(), Some(2), "{}", stderr(&both));
    pack(&raw, &kept, &["--update", "--drop-companion", "search"]);
    assert!(arrays(&kept).iter().all(|(n, _)| n.starts_with("steps")));
    assert_eq!(
        db(&kept)
            .query_row("SELECT count(*) FROM companions", [], |r| r
                .get::<_, i64>(0))
            .unwrap(),
        0
    );
}

/// Whether the filesystem under `dir` keeps a file's never-written stretch as a hole.
fn makes_holes(dir: &Path) -> bool {
    use std::os::unix::fs::{FileExt, MetadataExt};
    let probe = dir.join("hole-probe");
    let f = std::fs::File::create(&probe).unwrap();
    f.write_all_at(b"x", 4 << 20).unwrap();
    let sparse = f.metadata().unwrap().blocks() * 512 < 4 << 20;
    std::fs::remove_file(&probe).unwrap();
    sparse
}

#[test]
fn stretches_without_statistics_read_back_as_zeros_and_are_not_written() {
    // Games whose statistics are null for long stretches (tuple-valued moves: the first 300
    // rows, then rows 420-799 to the game's end, dozens of 4 KiB pages of zeros each), and a
    // game with no search object at all; packed as one file and split inside the stretches.
    let tmp = tempfile::tempdir().unwrap();
    let raw = tmp.path().join("raw");
    let runs = [(6, 800), (2, 500), (3, 650)];
    let stretches = |depth, run, i| {
        let tuple = match run {
            0 => !(300..420).contains(&i),
            1 => i % 3 != 0 && !(250..260).contains(&i),
            _ => return None,
        };
        if tuple { None } else { stats_of(depth, run, i) }
    };
    let truth = write_drop_of(&raw, &runs, stretches);
    // Run 2 has no search object at all (the old layout's rows end after the branch EVs).
    let sub = raw.join(run_folder(2));
    let gz = std::fs::read_dir(&sub)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with(".jsonl.gz"))
        .unwrap();
    let text = read_gz(&gz);
    let old: String = text
        .lines()
        .map(|l| format!("{}}}\n", &l[..l.find(",\"search\"").unwrap()]))
        .collect();
    write_gz(&gz, old.as_bytes());

    // Packed again with the copies' pages faulted in before they are written (what packs on
    // many workers do; DATASET_PACKER_PREFAULT=1 forces it): the same files.
    let split = ["--shard-rows", "333"];
    let packs: [(&str, Vec<&str>, &str); 4] = [
        ("one", vec![], "0"),
        ("split", split.to_vec(), "0"),
        ("one-prefaulted", vec!["--workers", "3"], "1"),
        (
            "split-prefaulted",
            [&split[..], &["--workers", "3"]].concat(),
            "1",
        ),
    ];
    for (name, extra, prefault) in &packs {
        let kept = tmp.path().join(name);
        let mut args = vec!["--search-stats"];
        args.extend(extra);
        let out = common::pack_env(
            &raw,
            &kept,
            &args,
            &[("DATASET_PACKER_PREFAULT", Some(prefault))],
        );
        assert!(out.status.success(), "{name}: {}", common::stderr(&out));
        check_family(&kept, &truth);
        let out = run_ok(&["validate", "--deep", s(&kept)]);
        assert!(out.contains("VALID"), "{out}");
    }
    for name in ["one", "split"] {
        let (plain, prefaulted) = (
            tmp.path().join(name),
            tmp.path().join(format!("{name}-prefaulted")),
        );
        let npy = |pack: &Path| files(pack, |n| n.ends_with(".npy"));
        let written = npy(&plain);
        let names: Vec<&String> = written.iter().map(|(n, _)| n).collect();
        assert!(names.len() >= 2, "{name}: {names:?}");
        assert!(written == npy(&prefaulted), "{name}: the .npy files differ");
    }
    // Written in one file, the zeros are holes where the filesystem makes them (prefaulted
    // too: only the pages written are faulted in): the 1,500 rows without statistics hold at
    // least 30 whole pages of zeros.
    for name in ["one", "one-prefaulted"] {
        let family = tmp.path().join(name).join("search.npy");
        if makes_holes(tmp.path()) {
            use std::os::unix::fs::MetadataExt;
            let meta = std::fs::metadata(&family).unwrap();
            let allocated = meta.blocks() * 512;
            assert!(
                allocated + 30 * 4096 <= meta.len(),
                "{name}: {} bytes allocated for a {}-byte file",
                allocated,
                meta.len()
            );
        }
    }
}

#[test]
fn shuffle_and_export_carry_the_statistics_with_their_rows() {
    let tmp = tempfile::tempdir().unwrap();
    let raw = tmp.path().join("raw");
    let truth = write_drop(&raw);
    let kept = tmp.path().join("kept");
    pack(&raw, &kept, &["--search-stats", "--shard-rows", "100"]);

    let shuffled = tmp.path().join("shuffled");
    run_ok(&[
        "shuffle",
        "--input",
        s(&kept),
        "--output",
        s(&shuffled),
        "--seed",
        "7",
        "--quiet",
    ]);
    check_family(&shuffled, &truth);

    // The runs of depth 6 and 7, exported as a pack: their rows and theirs only.
    let part = tmp.path().join("part");
    run_ok(&[
        "export",
        s(&kept),
        "--format",
        "pack",
        "--output",
        s(&part),
        "--where",
        "depth >= 6",
        "--quiet",
    ]);
    let selected: Truth = truth
        .iter()
        .filter(|((run, _), _)| RUNS[*run as usize].0 >= 6)
        .map(|((run, step), e)| {
            // The export renumbers the runs from 0, in run order.
            let new_id = RUNS[..*run as usize].iter().filter(|r| r.0 >= 6).count() as u64;
            ((new_id, *step), e.clone())
        })
        .collect();
    check_family(&part, &selected);
    let out = run_ok(&["validate", "--deep", s(&part)]);
    assert!(out.contains("VALID"), "{out}");

    // JSONL: each row ends with its `search` object again, so packing the export with
    // --search-stats gives the same steps and statistics, byte for byte.
    let again_raw = tmp.path().join("again_raw");
    run_ok(&[
        "export",
        s(&kept),
        "--format",
        "jsonl",
        "--output",
        s(&again_raw),
        "--quiet",
    ]);
    let again = tmp.path().join("again");
    pack(
        &again_raw,
        &again,
        &["--search-stats", "--shard-rows", "100"],
    );
    let steps_and_search =
        |p: &Path| files(p, |n| n.starts_with("steps") || n.starts_with("search"));
    assert_eq!(steps_and_search(&again), steps_and_search(&kept));
    // Rows without statistics are written as the logger writes tuple rows.
    let first = read_gz(&again_raw.join("run-0000000000.jsonl.gz"));
    let tuple = first.lines().nth(3).unwrap();
    assert!(
        tuple.ends_with("\"search\":{\"used\":false,\"total_nodes\":null,\"move_nodes\":null,\"tile_nodes\":null,\"tile_branches\":null,\"eval_calls\":null,\"prune_score\":null,\"prune_depth\":null,\"prune_prob\":null,\"cache_lookups\":null,\"cache_hits\":null,\"cache_updates\":null,\"cache_collisions\":null,\"cache_hit_rate\":null,\"max_move_depth\":null}}"),
        "{tuple}"
    );
}

#[test]
fn stats_and_show_report_the_nodes_searched() {
    let tmp = tempfile::tempdir().unwrap();
    let raw = tmp.path().join("raw");
    let truth = write_drop(&raw);
    let kept = tmp.path().join("kept");
    pack(&raw, &kept, &["--search-stats"]);

    // The median nodes per move of each depth, over the rows whose search was used.
    let stats: Value = serde_json::from_str(&run_ok(&["stats", "--json", s(&kept)])).unwrap();
    let depths = stats["search"]["depths"].as_array().unwrap();
    for depth in [2u64, 3, 6, 7] {
        let mut nodes: Vec<u64> = truth
            .iter()
            .filter(|((run, _), e)| RUNS[*run as usize].0 == depth && e.used)
            .map(|(_, e)| e.values[0].as_u64().unwrap())
            .collect();
        nodes.sort_unstable();
        let n = nodes.len();
        let median = (nodes[(n - 1) / 2] as f64 + nodes[n / 2] as f64) / 2.0;
        let got = depths
            .iter()
            .find(|d| d["depth"] == depth)
            .unwrap_or_else(|| panic!("depth {depth} in {depths:?}"));
        assert_eq!(got["rows"], n as u64, "depth {depth}");
        let m = got["median"].as_f64().unwrap();
        // Exact below 4,096 nodes, within 0.05% below the true median above.
        assert!(
            m <= median && m >= median * (1.0 - 1.0 / 2048.0),
            "depth {depth}: median {m}, want {median}"
        );
        if median < 4096.0 {
            assert_eq!(m, median, "depth {depth}");
        }
    }
    let text = run_ok(&["stats", s(&kept)]);
    assert!(
        text.contains("Search effort by depth (companion search: nodes searched per move)"),
        "{text}"
    );

    // show: the nodes of each step, and every field in --json.
    let run3: Value = serde_json::from_str(&run_ok(&[
        "show",
        s(&kept),
        "--run",
        "3",
        "--limit",
        "10",
        "--json",
    ]))
    .unwrap();
    for step in run3["steps"].as_array().unwrap() {
        let i = step["step_index"].as_u64().unwrap();
        let want = &truth[&(3, i)];
        let search = &step["search"];
        assert_eq!(search["used"], want.used, "step {i}");
        for (k, f) in FIELDS.iter().enumerate() {
            let v = if want.used {
                want.values[k].clone()
            } else {
                Value::Null
            };
            if *f == "cache_hit_rate" && want.used {
                let got = search[f].as_f64().unwrap() as f32;
                assert_eq!(got, v.as_f64().unwrap() as f32, "step {i} {f}");
            } else {
                assert_eq!(search[f], v, "step {i} {f}");
            }
        }
    }
    let text = run_ok(&["show", s(&kept), "--run", "3", "--limit", "6"]);
    let nodes = truth[&(3, 5)].values[0].as_u64().unwrap();
    assert_eq!(nodes, u64::MAX);
    assert!(text.contains("nodes 18,446,744,073,709,551,615"), "{text}");
    assert!(
        text.contains("step 3   played up   tuple11   board_eval"),
        "{text}"
    );
    let tuple_line = text.lines().find(|l| l.starts_with("step 3 ")).unwrap();
    assert!(tuple_line.ends_with("nodes -"), "{tuple_line}");
}

#[test]
fn a_malformed_search_object_is_an_error_naming_the_file_and_line() {
    let tmp = tempfile::tempdir().unwrap();
    let cases = [
        (
            "\"total_nodes\":-1",
            "field \"search.total_nodes\" must not be negative, found -1",
        ),
        (
            "\"total_nodes\":18446744073709551616",
            "field \"search.total_nodes\" is out of range: 18446744073709551616",
        ),
        (
            "\"used\":\"yes\"",
            "field \"search.used\" must be true, false or null, found a string",
        ),
        (
            "\"cache_hit_rate\":\"x\"",
            "search.cache_hit_rate must be a number or null",
        ),
        (
            "\"cache_hits\":1.5",
            "field \"search.cache_hits\" must be an integer, found 1.5",
        ),
        (
            "\"cache_hits\":1,\"cache_hits\":2",
            "duplicate field \"search.cache_hits\"",
        ),
        ("\"cache_hits\":1,", "malformed JSON"),
    ];
    for (k, (member, message)) in cases.iter().enumerate() {
        let raw = tmp.path().join(format!("raw{k}"));
        write_drop(&raw);
        // Line 9 of run 0 gets the bad member, in the logger's layout otherwise.
        let file = raw.join("r0_d2/depth02_worker00_seed0000001000_game000000.jsonl.gz");
        let text = read_gz(&file);
        let mut lines: Vec<String> = text.lines().map(String::from).collect();
        lines[8] = lines[8].replacen("\"search\":{", &format!("\"search\":{{{member},"), 1);
        write_gz(&file, (lines.join("\n") + "\n").as_bytes());
        for flag in [&["--search-stats"][..], &[]] {
            let out_dir = tmp.path().join(format!("out{k}"));
            let out = run(&[
                &[
                    "pack",
                    "--input",
                    s(&raw),
                    "--output",
                    s(&out_dir),
                    "--quiet",
                ][..],
                flag,
            ]
            .concat());
            let err = stderr(&out);
            assert_eq!(out.status.code(), Some(1), "{member}: {err}");
            assert!(
                err.contains(&format!("{}:9: ", file.display())) && err.contains(message),
                "{member} {flag:?}: {err}"
            );
            assert!(!out_dir.exists(), "{member}: nothing written");
        }
    }
}

#[test]
fn the_rust_api_reads_the_family_as_a_typed_view() {
    use dataset_packer::Pack;
    use dataset_packer::format::search::SearchStats;
    let tmp = tempfile::tempdir().unwrap();
    let raw = tmp.path().join("raw");
    let truth = write_drop(&raw);
    let kept = tmp.path().join("kept");
    pack(&raw, &kept, &["--search-stats", "--shard-rows", "100"]);

    let pack = Pack::open(&kept).unwrap();
    let family = pack.companion("search").unwrap();
    assert_eq!(family.field_names()[..2], ["used", "total_nodes"]);
    assert_eq!(family.len(), truth.len() as u64);
    for i in 0..pack.len() {
        let step = pack.row(i).unwrap();
        let want = &truth[&(u64::from(step.run_id()), u64::from(step.step_index()))];
        let stats = SearchStats::from_bytes(family.row(i).unwrap());
        assert_eq!(stats.used, want.used, "row {i}");
        let total: Vec<u64> = family.field_values(i, "total_nodes").unwrap();
        assert_eq!(total, [want.values[0].as_u64().unwrap()], "row {i}");
        assert_eq!(stats.total_nodes(), total[0], "row {i}");
        let rate: Vec<f32> = family.field_values(i, "cache_hit_rate").unwrap();
        assert_eq!(rate[0], want.values[12].as_f64().unwrap() as f32, "row {i}");
    }
}
