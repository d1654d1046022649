//! `pack` reads the logger's rows with a vector path where the CPU has it (src/raw/row_x86.rs)
//! and with the scalar parser otherwise (or with DATASET_PACKER_SCALAR=1). Both must give the
//! same pack byte for byte, and the same error for a bad row, wherever the row sits in its file.
//! tests/row_oracle.rs holds the two parsers to one reference row by row; this drives the real
//! binary both ways.

mod common;

use std::path::Path;
use std::process::Output;

use common::*;

/// `dataset-packer pack` of `input` into `output`, with the vector path on or off.
fn pack_with(input: &Path, output: &Path, scalar: bool) -> Output {
    pack_env(
        input,
        output,
        &[],
        &[("DATASET_PACKER_SCALAR", scalar.then_some("1"))],
    )
}

/// Every table of the pack's metadata.db except `session` (which records the time and the
/// command line), as text.
fn db_tables(pack: &Path) -> Vec<String> {
    let db = db(pack);
    let tables: Vec<String> = db
        // session and versions hold the command line and the time (and session the pack_id).
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT IN ('session', 'versions') ORDER BY name")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert!(
        tables.iter().any(|t| t == "runs"),
        "no runs table in {tables:?}"
    );
    tables
        .iter()
        .map(|t| {
            let mut stmt = db
                .prepare(&format!("SELECT * FROM {t} ORDER BY 1"))
                .unwrap();
            let n = stmt.column_count();
            let rows: Vec<String> = stmt
                .query_map([], |r| {
                    Ok((0..n)
                        .map(|i| format!("{:?}", r.get_ref(i).unwrap()))
                        .collect::<Vec<_>>()
                        .join("|"))
                })
                .unwrap()
                .map(Result::unwrap)
                .collect();
            format!("{t}: {}", rows.join("\n"))
        })
        .collect()
}

/// Packs `input` both ways and asserts the same outcome: the same files and tables on success,
/// the same exit code and message on failure. Returns whether it succeeded.
fn same_both_ways(input: &Path) -> bool {
    let tmp = tempfile::tempdir().unwrap();
    let (vector_out, scalar_out) = (tmp.path().join("vector"), tmp.path().join("scalar"));
    let vector = pack_with(input, &vector_out, false);
    let scalar = pack_with(input, &scalar_out, true);
    assert_eq!(
        vector.status.code(),
        scalar.status.code(),
        "{}: exit codes differ; vector: {}; scalar: {}",
        input.display(),
        stderr(&vector),
        stderr(&scalar)
    );
    assert_eq!(
        stderr(&vector),
        stderr(&scalar),
        "{}: messages differ",
        input.display()
    );
    if !vector.status.success() {
        return false;
    }
    let (v, s) = (pack_bytes(&vector_out), pack_bytes(&scalar_out));
    assert!(
        v.iter().any(|(n, _)| n.starts_with("steps")),
        "no shard written"
    );
    assert!(
        v == s,
        "{}: shards or valuation_types.json differ",
        input.display()
    );
    assert_eq!(
        db_tables(&vector_out),
        db_tables(&scalar_out),
        "{}",
        input.display()
    );
    true
}

#[test]
fn the_fixture_drops_pack_the_same_both_ways() {
    for drop in ["raw", "raw_d23", "raw_design", "findings"] {
        assert!(same_both_ways(&fixture(drop)), "{drop}");
    }
}

/// The logger lines `0..n` of `seed`, in the current logger's layout (`current`, with the
/// `search` object) or the design notes' (without).
fn logger_lines(n: u64, seed: u64, current: bool) -> Vec<String> {
    (0..n)
        .map(|k| {
            let line = logger_line(k, seed);
            if current { with_search(&line, k) } else { line }
        })
        .collect()
}

/// A row in the logger's layout; `k` varies every number's length and sign, the board's
/// two-digit cells, the nulls and the valuation type.
fn logger_line(k: u64, seed: u64) -> String {
    let mix = |salt: u64| {
        (k.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ salt).wrapping_mul(0xBF58_476D_1CE4_E5B9) >> 20
    };
    let ev = |salt: u64| {
        let r = mix(salt);
        match r % 7 {
            0 => "null".to_string(),
            1 => format!("-{}.{:06}", r % 1000, r % 1_000_000),
            2 => format!("{}.{:06}", r % 100_000, (r >> 7) % 1_000_000),
            3 => format!("{}.{:03}", r % 10, r % 1000),
            4 => format!("-0.{:06}", r % 1_000_000),
            5 => format!("{}", r % 50),
            _ => format!("{}.{:06}", r % 10, r % 1_000_000),
        }
    };
    let cells: Vec<String> = (0..16u64)
        .map(|c| (mix(100 + c) % 17).to_string())
        .collect();
    let vtype = ["\"search\"", "\"tuple11\"", "\"tuple10\"", "null"][(mix(7) % 4) as usize];
    let mv = ["up", "down", "left", "right"][(mix(8) % 4) as usize];
    format!(
        "{{\"seed\":{seed},\"step_index\":{k},\"max_rank\":{},\"move\":\"{mv}\",\"valuation_type\":{vtype},\"valuation\":{},\"board\":[{}],\"branch_evs\":{{\"up\":{},\"left\":{},\"right\":{},\"down\":{}}}}}",
        mix(9) % 17,
        ev(10),
        cells.join(","),
        ev(11),
        ev(12),
        ev(13),
        ev(14)
    )
}

/// A drop of one run of `lines` (joined with `\n`, plus a final `\n`).
fn write_run(dir: &Path, seed: u64, lines: &[String]) {
    std::fs::create_dir_all(dir).unwrap();
    let stem = format!("depth06_worker00_seed{seed:010}_game000000");
    let mut text = lines.join("\n");
    text.push('\n');
    write_gz(&dir.join(format!("{stem}.jsonl.gz")), text.as_bytes());
    let sidecar = format!(
        "{{\"seed\":{seed},\"depth\":6,\"game_index\":0,\"num_moves\":{},\"score\":100,\"max_tile\":1024,\"max_rank\":10,\"sum_tile\":2000,\"seconds\":1.5}}",
        lines.len()
    );
    std::fs::write(dir.join(format!("{stem}.meta.json")), sidecar).unwrap();
}

#[test]
fn varied_rows_pack_the_same_both_ways() {
    for current in [true, false] {
        varied_rows_in_a_layout_pack_the_same_both_ways(current);
    }
}

fn varied_rows_in_a_layout_pack_the_same_both_ways(current: bool) {
    let tmp = tempfile::tempdir().unwrap();
    let seed = 4_294_967_295;
    let mut lines = logger_lines(3000, seed, current);
    // Rows the vector path leaves to the scalar paths, in the middle of the file: another
    // valuation name, a long number, spaces, keys in another order, a CRLF line end, a blank
    // line.
    lines[500] = lines[500].replace(
        "\"valuation_type\":\"search\"",
        "\"valuation_type\":\"mcts\"",
    );
    lines[501] = lines[501].replace("\"valuation_type\":null", "\"valuation_type\":\"mcts\"");
    lines[900] = lines[900].replace(
        "\"valuation\":",
        "\"valuation\":1234567890123456789.5,\"x\":",
    );
    lines[1200] = lines[1200].replace(",\"move\":", ", \"move\": ");
    lines[1500] = lines[1500]
        .replacen("{\"seed\":4294967295,", "{", 1)
        .replace("}}", "},\"seed\":4294967295}");
    lines[2000].push('\r');
    lines[2500] = String::new();
    write_run(&tmp.path().join("drop"), seed, &lines);
    assert!(same_both_ways(&tmp.path().join("drop")));
}

#[test]
fn a_bad_row_mid_file_gives_the_same_error_both_ways() {
    // Each damage is put on line 41 of 80, so the vector path sees it with its whole window
    // of text after it.
    let damages: &[(&str, &str)] = &[
        (",\"board\":[", ",\"board\":[17,"),
        (",\"board\":[", ",\"board\":[01,"),
        (",\"board\":[", ",\"board\":[-1,"),
        ("\"valuation\":", "\"valuation\":01"),
        ("\"valuation\":", "\"valuation\":-"),
        ("\"valuation\":", "\"valuation\":1e999,\"y\":"),
        ("\"up\":", "\"up\":1.2.3,\"q\":"),
        ("\"max_rank\":", "\"max_rank\":256"),
        ("\"step_index\":40", "\"step_index\":40.5"),
        ("\"move\":\"", "\"move\":\"x"),
        ("}}", "}"),
        ("\"seed\":4294967295", "\"seed\":4294967296"),
        // The row before starts with the same seed: the damage is in the remembered start.
        ("\"step_index\":", "\"step_index\";"),
        ("{\"seed\":", "{\"seed\":,"),
        ("{\"seed\":", "[\"seed\":"),
    ];
    let seed = 4_294_967_295;
    let tmp = tempfile::tempdir().unwrap();
    for ((n, (from, to)), current) in damages.iter().enumerate().zip([true, false].iter().cycle()) {
        // Half the damages on rows of the current logger, half on the design notes' rows.
        let mut lines = logger_lines(80, seed, *current);
        assert!(lines[40].contains(from), "{from} not in {}", lines[40]);
        lines[40] = lines[40].replacen(from, to, 1);
        let dir = tmp.path().join(format!("bad{n}"));
        write_run(&dir, seed, &lines);
        assert!(
            !same_both_ways(&dir),
            "a row damaged by {from:?} -> {to:?} was packed"
        );
    }
}

/// The vector path remembers the previous row's `{"seed":…,"step_index":` start and skips
/// reading it when the next row starts with the same bytes. Rows whose seeds change, share
/// leading digits, change length, turn null, or overflow a u32 must still give each row its
/// own seed (the `seed` column, bytes 28..32) and the same pack as the scalar path.
#[test]
fn a_seed_that_changes_between_rows_is_read_again() {
    let seed = 4_294_967_295u64;
    // Each row's seed text and the seed its row must get (null: the sidecar's).
    let seeds: &[(&str, u64)] = &[
        ("4294967295", seed),
        ("4294967295", seed),
        ("429496729", 429_496_729),    // a prefix of the one before
        ("4294967290", 4_294_967_290), // same length, last digit differs
        ("42949672", 42_949_672),
        ("null", seed),
        ("null", seed),
        ("7", 7),
        ("70", 70),
        ("7", 7),
        ("0", 0),
        ("4294967295", seed),
    ];
    let mut lines = Vec::new();
    let mut expected = Vec::new();
    for (k, line) in logger_lines(120, seed, true).iter().enumerate() {
        let (text, value) = seeds[(k / 3) % seeds.len()];
        lines.push(line.replacen(
            &format!("{{\"seed\":{seed},"),
            &format!("{{\"seed\":{text},"),
            1,
        ));
        expected.push(value as u32);
    }
    let tmp = tempfile::tempdir().unwrap();
    let drop = tmp.path().join("drop");
    write_run(&drop, seed, &lines);
    assert!(same_both_ways(&drop));

    let out = tmp.path().join("pack");
    let packed = pack_with(&drop, &out, false);
    assert!(packed.status.success(), "{}", stderr(&packed));
    let got: Vec<u32> = read_rows(&out)
        .iter()
        .map(|r| u32::from_le_bytes(r[28..32].try_into().unwrap()))
        .collect();
    assert_eq!(got, expected);

    // A seed just over u32 after rows that were read from the memo is still refused.
    let mut bad = lines.clone();
    assert!(bad[60].starts_with("{\"seed\":70,"), "{}", bad[60]);
    bad[60] = bad[60].replacen("{\"seed\":70,", "{\"seed\":4294967296,", 1);
    let bad_dir = tmp.path().join("bad");
    write_run(&bad_dir, seed, &bad);
    assert!(!same_both_ways(&bad_dir));
}

/// The current logger's `search` object after the branch EVs, as it writes it: the counters of
/// a search (`used` true, sizes of depth 2 to 7 and beyond u32) or the nulls of a tuple row.
fn with_search(line: &str, k: u64) -> String {
    // The 12 counters before the hit rate.
    let keys = &common::logger::SEARCH_KEYS[..12];
    let object = if k % 5 == 4 {
        let nulls: Vec<String> = keys.iter().map(|key| format!("\"{key}\":null")).collect();
        format!(
            "{{\"used\":false,{},\"cache_hit_rate\":null,\"max_move_depth\":null}}",
            nulls.join(",")
        )
    } else {
        let scale = [1_000u64, 100_000, 10_000_000, 10_000_000_000][(k % 4) as usize];
        let counts: Vec<String> = keys
            .iter()
            .enumerate()
            .map(|(i, key)| format!("\"{key}\":{}", (k * 7919 + i as u64 * 104_729) % scale))
            .collect();
        format!(
            "{{\"used\":true,{},\"cache_hit_rate\":{}.{:06},\"max_move_depth\":{}}}",
            counts.join(","),
            k % 100,
            k * 37 % 1_000_000,
            k % 8
        )
    };
    let body = line.strip_suffix('}').unwrap();
    format!("{body},\"search\":{object}}}")
}

/// Rows of the current logger (a `search` object at the end, lines past 512 bytes) take the
/// fast paths and pack exactly as the same rows without the object; damage inside the object
/// is the general parser's error, file and line, both ways.
#[test]
fn current_logger_rows_pack_like_their_rows_without_search() {
    let seed = 12_345;
    let tmp = tempfile::tempdir().unwrap();
    let plain: Vec<String> = (0..3000).map(|k| logger_line(k, seed)).collect();
    let current: Vec<String> = plain
        .iter()
        .enumerate()
        .map(|(k, l)| with_search(l, k as u64))
        .collect();
    assert!(current.iter().any(|l| l.len() > 512), "no long line");
    write_run(&tmp.path().join("plain"), seed, &plain);
    write_run(&tmp.path().join("current"), seed, &current);
    for (name, drop) in [("plain", "plain"), ("current", "current")] {
        assert!(same_both_ways(&tmp.path().join(drop)), "{name}");
        pack_with(
            &tmp.path().join(drop),
            &tmp.path().join(format!("out-{name}")),
            false,
        );
    }
    let steps =
        |name: &str| std::fs::read(tmp.path().join(format!("out-{name}/steps.npy"))).unwrap();
    assert!(
        steps("plain") == steps("current"),
        "the search object changed the rows"
    );

    let damages: &[(&str, &str)] = &[
        ("\"cache_hits\":", "\"cache_hits\":01"),
        ("\"cache_hit_rate\":", "\"cache_hit_rate\":1.2.3,\"x\":"),
        ("\"used\":true", "\"used\":tru"),
        ("\"max_move_depth\":", "\"max_move_depth\":--"),
        ("}}", "}"),
        ("\"search\":{", "\"search\":["),
    ];
    for (n, (from, to)) in damages.iter().enumerate() {
        let mut lines = current[..80].to_vec();
        assert!(lines[41].contains(from), "{from} not in {}", lines[41]);
        lines[41] = lines[41].replacen(from, to, 1);
        let dir = tmp.path().join(format!("bad{n}"));
        write_run(&dir, seed, &lines);
        assert!(
            !same_both_ways(&dir),
            "damage {from:?} -> {to:?} was packed"
        );
        let out = pack_with(&dir, &tmp.path().join(format!("bad-out{n}")), false);
        assert!(stderr(&out).contains(".jsonl.gz:42: "), "{}", stderr(&out));
    }
    // A search object of another shape (more members, spaces) is the general path's: read,
    // and the same pack.
    let mut odd = current[..80].to_vec();
    odd[10] = odd[10].replace("\"used\":true,", "\"used\":true, \"extra\":[1,2],");
    odd[11] = odd[11].replace(",\"search\":", ",\"search\" : ");
    write_run(&tmp.path().join("odd"), seed, &odd);
    assert!(same_both_ways(&tmp.path().join("odd")));
}
