//! `report` end to end: the page made from real packs is parsed back; every figure is there with
//! a title, labelled axes and a table whose numbers equal `stats --json` (and, for search
//! effort and provenance, numbers recomputed here from the companion written and metadata.db);
//! nothing on it loads from the network; two packs share a legend; the output is written
//! atomically and the packs are left as they were. When Debian's chromium is installed, the
//! page is also loaded in it: no console errors, and a screenshot that is not blank.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use serde_json::Value;

/// The figures every page has, by section id.
const FIGURES: [&str; 10] = [
    "run-length",
    "score-by-depth",
    "highest-tile",
    "valuation-mix",
    "moves",
    "ev-distribution",
    "board-eval",
    "search-effort",
    "findings",
    "provenance",
];

/// Two packs of the fixture drop: `whole` in one shard, `sharded` in shards of 100 rows with a
/// `search` companion of 3 per row.
fn two_packs(t: &Path) -> (PathBuf, PathBuf) {
    let whole = t.join("whole");
    let sharded = t.join("sharded");
    pack(&fixture("raw"), &whole, &[]);
    pack(&fixture("raw"), &sharded, &["--shard-rows", "100"]);
    let rows = read_rows(&sharded).len();
    let mut npy = npy_header("'<u4'", rows);
    for _ in 0..rows {
        npy.extend_from_slice(&3u32.to_le_bytes());
    }
    let search = t.join("search.npy");
    std::fs::write(&search, npy).unwrap();
    run_ok(&[
        "attach",
        s(&sharded),
        "--name",
        "search",
        "--from",
        s(&search),
        "--quiet",
    ]);
    (whole, sharded)
}

fn stats_json(pack: &Path, extra: &[&str]) -> Value {
    let mut args = vec!["stats", s(pack), "--json"];
    args.extend_from_slice(extra);
    serde_json::from_str(&run_ok(&args)).unwrap()
}

fn unescape(t: &str) -> String {
    t.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}

/// The text between `open` and the next `close` after it, from `at`.
fn between<'a>(html: &'a str, open: &str, close: &str) -> Vec<&'a str> {
    let mut out = Vec::new();
    let mut rest = html;
    while let Some(i) = rest.find(open) {
        let after = &rest[i + open.len()..];
        let j = after.find(close).expect("closed");
        out.push(&after[..j]);
        rest = &after[j + close.len()..];
    }
    out
}

/// A table of the page: header cells and rows of cell texts.
struct Table {
    head: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// The rows of `pack`, without the pack column.
    fn of(&self, pack: &str) -> Vec<Vec<String>> {
        self.rows
            .iter()
            .filter(|r| r[0] == pack)
            .map(|r| r[1..].to_vec())
            .collect()
    }
}

fn cells(row: &str) -> Vec<String> {
    row.split("</td>")
        .filter_map(|c| c.find('>').map(|i| unescape(&c[i + 1..])))
        .collect()
}

/// Every `<table data-figure=…>` of the page, by figure name.
fn tables(html: &str) -> BTreeMap<String, Table> {
    between(html, "<table data-figure=\"", "</table>")
        .into_iter()
        .map(|t| {
            let id = t[..t.find('"').unwrap()].to_string();
            let head = between(t, "<th>", "</th>")
                .into_iter()
                .map(unescape)
                .collect();
            let body = &t[t.find("<tbody>").unwrap()..];
            let rows = between(body, "<tr>", "</tr>")
                .into_iter()
                .map(cells)
                .collect();
            (id, Table { head, rows })
        })
        .collect()
}

/// A JSON value as the page writes it in a cell (null: empty).
fn cell(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        v => v.to_string(),
    }
}

/// Cells equal as numbers when both parse (1 and 1.0 are one number), else as text.
fn assert_rows(got: Vec<Vec<String>>, want: Vec<Vec<String>>, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: {got:?} vs {want:?}");
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g.len(), w.len(), "{what}: {g:?} vs {w:?}");
        for (a, b) in g.iter().zip(w) {
            match (a.parse::<f64>(), b.parse::<f64>()) {
                // serde_json's default float parser may land one unit in the last place off
                // the nearest double; the page's text is parsed exactly by Rust.
                (Ok(x), Ok(y)) => assert!(
                    x == y || (x - y).abs() <= 4.0 * f64::EPSILON * x.abs().max(y.abs()),
                    "{what}: {g:?} vs {w:?}"
                ),
                _ => assert_eq!(a, b, "{what}: {g:?} vs {w:?}"),
            }
        }
    }
}

/// Rows of `[keys…]` from each object of a JSON array.
fn rows_of(items: &Value, keys: &[&str]) -> Vec<Vec<String>> {
    items
        .as_array()
        .unwrap()
        .iter()
        .map(|o| keys.iter().map(|k| cell(&o[*k])).collect())
        .collect()
}

/// Every table of the report equals what `stats --json` prints for the same pack.
fn assert_tables_equal_stats(tables: &BTreeMap<String, Table>, name: &str, st: &Value) {
    let t = |id: &str| tables.get(id).unwrap_or_else(|| panic!("no {id} table"));
    let bins = &st["steps_per_run"]["histogram"];
    assert_rows(
        t("run-length").of(name),
        rows_of(bins, &["from", "to", "runs"]),
        "run length",
    );

    let mut want = Vec::new();
    for d in st["depths"].as_array().unwrap() {
        for mut r in rows_of(&d["score_histogram"], &["from", "to", "runs"]) {
            r.insert(0, cell(&d["depth"]));
            want.push(r);
        }
    }
    assert_rows(t("score-by-depth").of(name), want, "score by depth");

    let tiles = rows_of(&st["highest_tile"], &["tile", "reached", "highest"]);
    assert_rows(t("highest-tile").of(name), tiles, "highest tile");

    let (mut mix, mut evals) = (Vec::new(), Vec::new());
    for b in st["by_step"].as_array().unwrap() {
        let types = st["valuation_types"].as_array().unwrap();
        for ty in types {
            let n = &b["rows_by_type"][ty["name"].as_str().unwrap()];
            if !n.is_null() {
                mix.push(vec![
                    cell(&b["from"]),
                    cell(&b["to"]),
                    cell(&ty["name"]),
                    cell(n),
                ]);
            }
        }
        let e = &b["board_eval"];
        evals.push(
            [
                &b["from"], &b["to"], &b["rows"], &e["min"], &e["mean"], &e["max"],
            ]
            .map(cell)
            .to_vec(),
        );
    }
    assert!(!mix.is_empty());
    assert_rows(t("valuation-mix").of(name), mix, "valuation mix");
    assert_rows(t("board-eval").of(name), evals, "board_eval");

    let moves = ["up", "down", "left", "right", "invalid"]
        .map(|m| vec![m.to_string(), cell(&st["moves"][m])])
        .to_vec();
    assert_rows(t("moves").of(name), moves, "moves");

    let (mut spread, mut hist) = (Vec::new(), Vec::new());
    for (ty, e) in st["ev_legal_moves"].as_object().unwrap() {
        let keys = ["evs", "min", "p25", "median", "mean", "p75", "max"];
        let mut r = vec![ty.clone()];
        r.extend(keys.iter().map(|k| cell(&e[*k])));
        spread.push(r);
        for mut b in rows_of(&e["histogram"], &["from", "to", "evs"]) {
            b.insert(0, ty.clone());
            hist.push(b);
        }
    }
    // The page lists types in id order, the JSON object by name: compare as sets of rows.
    let sorted = |mut v: Vec<Vec<String>>| {
        v.sort();
        v
    };
    assert_rows(sorted(t("ev-spread").of(name)), sorted(spread), "EV spread");
    assert_rows(
        sorted(t("ev-histogram").of(name)),
        sorted(hist),
        "EV histogram",
    );

    let mut findings: Vec<Vec<String>> = st["findings"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| vec![k.clone(), cell(v)])
        .collect();
    if !findings.iter().any(|f| f[0] == "duplicate_run") {
        findings.push(vec!["duplicate_run".into(), "0".into()]);
    }
    findings.push(vec!["skipped_runs".into(), cell(&st["skipped_runs"])]);
    assert_rows(t("findings").of(name), findings, "findings");

    let search = match &st["search"] {
        Value::Null => Vec::new(),
        e => rows_of(
            &e["depths"],
            &["depth", "rows", "sum", "mean", "median", "max"],
        ),
    };
    assert_rows(t("search-effort").of(name), search, "search effort");
}

#[test]
fn the_page_has_every_figure_with_the_numbers_of_stats_json() {
    let t = tempfile::tempdir().unwrap();
    let (whole, sharded) = two_packs(t.path());
    let before: Vec<_> = [&whole, &sharded].map(|p| files(p, |_| true)).to_vec();
    let out = t.path().join("out/report.html");
    let said = run_ok(&["report", s(&whole), s(&sharded), "--output", s(&out)]);
    assert!(
        said.contains("report.html") && said.contains("2 packs"),
        "{said}"
    );
    let after: Vec<_> = [&whole, &sharded].map(|p| files(p, |_| true)).to_vec();
    assert!(before == after, "report changed a pack");
    assert_eq!(names(out.parent().unwrap()), vec!["report.html"]);
    let html = std::fs::read_to_string(&out).unwrap();

    // Every figure: a title, and (but provenance) a chart with both axes labelled and a legend
    // naming both packs; the numbers in a <details>.
    let sections = between(&html, "<section class=\"figure\" id=\"", "</section>");
    let ids: Vec<&str> = sections
        .iter()
        .map(|s| &s[..s.find('"').unwrap()])
        .collect();
    assert_eq!(ids, FIGURES);
    for sec in &sections {
        let id = &sec[..sec.find('"').unwrap()];
        assert!(sec.contains("<h2>"), "{id}: no title");
        assert!(
            sec.contains("<details") && sec.contains("<table"),
            "{id}: no table"
        );
        // The fixture drop has no findings, duplicates or skipped runs: a sentence says so.
        if id == "provenance" || id == "findings" {
            assert!(!sec.contains("<svg"), "{id}: a chart of nothing");
            continue;
        }
        assert!(sec.contains("<svg"), "{id}: no chart");
        for svg in between(sec, "<svg", "</svg>") {
            let x = between(svg, "class=\"axis-label x-label\">", "</text>");
            let y = between(svg, "class=\"axis-label y-label\">", "</text>");
            assert!(x.len() == 1 && !x[0].is_empty(), "{id}: no x-axis label");
            assert!(y.len() == 1 && !y[0].is_empty(), "{id}: no y-axis label");
            let legend = between(svg, "class=\"legend-label\">", "</text>");
            assert!(!legend.is_empty(), "{id}: no legend");
            let named = |n: &str| legend.iter().any(|l| l.starts_with(n));
            if id == "search-effort" {
                assert!(named("sharded") && !named("whole"), "{legend:?}");
            } else if id != "valuation-mix" {
                assert!(
                    named("whole") && named("sharded"),
                    "{id}: legend {legend:?}"
                );
            }
        }
    }
    // The search figure: drawn for the pack that has the companion, a sentence for the other.
    let search = sections
        .iter()
        .find(|s| s.starts_with("search-effort"))
        .unwrap();
    assert!(search.contains("whole: no search statistics in this pack."));
    // Each pack keeps its colour from chart to chart: sharded, the second, is never the first's.
    assert!(search.contains("fill=\"#E69F00\"") && !search.contains("fill=\"#0072B2\""));

    // Nothing that loads from anywhere.
    for attr in [
        "src=", "href=", "url(", "@import", "<script", "<link", "<iframe",
    ] {
        assert!(!html.contains(attr), "the page has {attr}");
    }
    assert!(!html.contains("http://") && !html.contains("https://"));

    let tables = tables(&html);
    for (name, pack) in [("whole", &whole), ("sharded", &sharded)] {
        assert_tables_equal_stats(&tables, name, &stats_json(pack, &[]));
    }
    // Search effort recomputed: 3 per row, the rows of each depth from the runs table.
    let depth_rows: BTreeMap<String, i64> = db(&sharded)
        .prepare("SELECT d.depth, SUM(r.steps) FROM runs r JOIN run_details d ON d.run_id = r.id GROUP BY d.depth")
        .unwrap()
        .query_map([], |r| Ok((r.get::<_, i64>(0)?.to_string(), r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let want: Vec<Vec<String>> = depth_rows
        .iter()
        .map(|(d, n)| {
            [
                d.clone(),
                n.to_string(),
                (3 * n).to_string(),
                "3".into(),
                String::new(), // no median of a companion from another tool
                "3".into(),
            ]
            .to_vec()
        })
        .collect();
    assert_eq!(want.len(), 2);
    assert_rows(
        tables["search-effort"].of("sharded"),
        want,
        "search recomputed",
    );
    // Provenance: the session table as metadata.db has it, and the command line that made it.
    let session: Vec<Vec<String>> = db(&whole)
        .prepare("SELECT meta_key, meta_value FROM session ORDER BY meta_key")
        .unwrap()
        .query_map([], |r| Ok(vec![r.get(0)?, r.get(1)?]))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(tables["session"].of("whole"), session);
    let commands = tables["commands"].of("whole");
    assert!(commands[0][1].contains("pack --input"), "{commands:?}");
    assert_eq!(tables["run-length"].head, ["pack", "from", "to", "runs"]);
}

#[test]
fn where_restricts_the_report_as_it_restricts_stats() {
    let t = tempfile::tempdir().unwrap();
    let (whole, _) = two_packs(t.path());
    let out = t.path().join("d7.html");
    let sel = ["--where", "depth = ?", "--param", "7"];
    let mut args = vec!["report", s(&whole), "--output", s(&out), "--quiet"];
    args.extend_from_slice(&sel);
    assert_eq!(run_ok(&args), "");
    let html = std::fs::read_to_string(&out).unwrap();
    let st = stats_json(&whole, &sel);
    assert_eq!(st["runs"], 5);
    assert_tables_equal_stats(&tables(&html), "whole", &st);
    assert!(html.contains("--where depth = ?"));
}

#[test]
fn an_existing_file_is_kept_and_a_bad_pack_leaves_nothing() {
    let t = tempfile::tempdir().unwrap();
    let (whole, _) = two_packs(t.path());
    let out = t.path().join("r.html");
    std::fs::write(&out, "mine").unwrap();
    let err = stderr(&run(&["report", s(&whole), "--output", s(&out)]));
    assert!(
        err.contains("already exists") && err.contains("--overwrite"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "mine");
    run_ok(&[
        "report",
        s(&whole),
        "--output",
        s(&out),
        "--overwrite",
        "--quiet",
    ]);
    assert!(
        std::fs::read_to_string(&out)
            .unwrap()
            .starts_with("<!DOCTYPE html>")
    );

    let missing = t.path().join("no-such-pack");
    let fresh = t.path().join("fresh.html");
    let res = run(&["report", s(&whole), s(&missing), "--output", s(&fresh)]);
    assert_eq!(res.status.code(), Some(1));
    assert!(stderr(&res).contains("no-such-pack"), "{}", stderr(&res));
    assert!(!fresh.exists());
    let left: Vec<String> = names(t.path())
        .into_iter()
        .filter(|n| n.contains("tmp"))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");

    let err = stderr(&run(&["report", s(&whole), "--output", s(&whole)]));
    assert!(
        err.contains("is one of the packs") || err.contains("folder"),
        "{err}"
    );
    let help = run_ok(&["report", "--help"]);
    assert!(help.contains("Examples:") && help.contains("--output d6-vs-d7.html"));
}

// ---------------------------------------------------------------------------------------------
// In a real browser

const CHROMIUM: &str = "/usr/bin/chromium";

/// Runs headless Chromium, given at most two minutes (coreutils' `timeout`): a browser that
/// hangs fails the test instead of holding the suite until CI's limit.
fn chromium(profile: &Path, args: &[&str]) -> std::process::Output {
    Command::new("timeout")
        .args(["120", CHROMIUM])
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .output()
        .expect("chromium runs")
}

#[test]
fn the_page_draws_in_chromium_without_console_errors() {
    if !Path::new(CHROMIUM).exists() {
        println!("skipped: chromium not installed ({CHROMIUM}; apt-get install -y chromium)");
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let (whole, sharded) = two_packs(t.path());
    let page = t.path().join("report.html");
    run_ok(&[
        "report",
        s(&whole),
        s(&sharded),
        "--output",
        s(&page),
        "--quiet",
    ]);
    let url = format!("file://{}", page.display());
    let profile = t.path().join("profile");

    let loaded = chromium(
        &profile,
        &["--enable-logging=stderr", "--v=0", "--dump-dom", &url],
    );
    let dom = String::from_utf8_lossy(&loaded.stdout);
    assert!(loaded.status.success(), "{}", stderr(&loaded));
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.matches("<svg").count() >= 9);
    assert_eq!(
        dom.matches("<svg").count(),
        html.matches("<svg").count(),
        "every chart is in the DOM chromium built"
    );
    let console: Vec<&str> = std::str::from_utf8(&loaded.stderr)
        .unwrap_or("")
        .lines()
        .filter(|l| l.contains("CONSOLE") || l.contains("Failed to load") || l.contains("net::ERR"))
        .collect();
    assert!(console.is_empty(), "console errors: {console:#?}");

    let png = t.path().join("shot.png");
    let shot = chromium(
        &profile,
        &[
            &format!("--screenshot={}", png.display()),
            "--window-size=1200,3000",
            &url,
        ],
    );
    assert!(png.exists(), "no screenshot: {}", stderr(&shot));
    let (width, height, pixels) = decode_png(&std::fs::read(&png).unwrap());
    assert_eq!((width, height), (1200, 3000));
    let mut colours: BTreeMap<[u8; 3], u64> = BTreeMap::new();
    for p in &pixels {
        *colours.entry(*p).or_default() += 1;
    }
    // The first two packs' colours fill bars and lines; a blank page is one colour.
    let blue = colours.get(&[0x00, 0x72, 0xB2]).copied().unwrap_or(0);
    let orange = colours.get(&[0xE6, 0x9F, 0x00]).copied().unwrap_or(0);
    assert!(colours.len() > 50, "{} colours", colours.len());
    assert!(
        blue > 5000 && orange > 5000,
        "blue {blue}, orange {orange} pixels"
    );
    let white = colours.get(&[255, 255, 255]).copied().unwrap_or(0);
    assert!(white < pixels.len() as u64 * 95 / 100, "mostly blank");
}

/// A PNG of 8-bit RGB or RGBA, not interlaced (what chromium writes), as RGB pixels.
fn decode_png(bytes: &[u8]) -> (usize, usize, Vec<[u8; 3]>) {
    use std::io::Read;
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    let (mut at, mut idat) = (8, Vec::new());
    let (mut width, mut height, mut channels) = (0, 0, 0);
    while at < bytes.len() {
        let len = u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        let kind = &bytes[at + 4..at + 8];
        let data = &bytes[at + 8..at + 8 + len];
        match kind {
            b"IHDR" => {
                width = u32::from_be_bytes(data[..4].try_into().unwrap()) as usize;
                height = u32::from_be_bytes(data[4..8].try_into().unwrap()) as usize;
                assert_eq!((data[8], data[12]), (8, 0), "8-bit, not interlaced");
                channels = match data[9] {
                    2 => 3,
                    6 => 4,
                    t => panic!("PNG colour type {t}"),
                };
            }
            b"IDAT" => idat.extend_from_slice(data),
            _ => {}
        }
        at += 12 + len;
    }
    let mut raw = Vec::new();
    flate2::read::ZlibDecoder::new(&idat[..])
        .read_to_end(&mut raw)
        .unwrap();
    let stride = width * channels;
    let mut prev = vec![0u8; stride];
    let mut pixels = Vec::with_capacity(width * height);
    for line in raw.chunks_exact(stride + 1) {
        let (filter, src) = (line[0], &line[1..]);
        let mut cur = vec![0u8; stride];
        for i in 0..stride {
            let a = if i >= channels { cur[i - channels] } else { 0 };
            let (b, c) = (prev[i], if i >= channels { prev[i - channels] } else { 0 });
            let predicted = match filter {
                0 => 0,
                1 => a,
                2 => b,
                3 => ((a as u16 + b as u16) / 2) as u8,
                4 => paeth(a, b, c),
                f => panic!("PNG filter {f}"),
            };
            cur[i] = src[i].wrapping_add(predicted);
        }
        pixels.extend(cur.chunks_exact(channels).map(|p| [p[0], p[1], p[2]]));
        prev = cur;
    }
    assert_eq!(pixels.len(), width * height);
    (width, height, pixels)
}

fn paeth(a: u8, b: u8, c: u8) -> u8 {
    let p = a as i16 + b as i16 - c as i16;
    let (pa, pb, pc) = (
        (p - a as i16).abs(),
        (p - b as i16).abs(),
        (p - c as i16).abs(),
    );
    if pa <= pb && pa <= pc {
        a
    } else if pb <= pc {
        b
    } else {
        c
    }
}

/// The figures `report` added to `stats --json` (run-length histogram, scores per depth, the
/// by-step valuation mix and board_eval, EV histogram totals) recomputed from the runs table
/// and the shard bytes.
#[test]
fn the_new_figures_match_the_rows() {
    let t = tempfile::tempdir().unwrap();
    let (whole, _) = two_packs(t.path());
    let st = stats_json(&whole, &[]);
    let runs = runs_table(&whole);

    let bins = st["steps_per_run"]["histogram"].as_array().unwrap();
    let width = bins[0]["to"].as_i64().unwrap() + 1;
    assert_eq!(width, 10, "nice width for 300 steps in 40 bins");
    let mut want = vec![0u64; bins.len()];
    for r in &runs {
        want[(r.2 / width) as usize] += 1;
    }
    let got: Vec<u64> = bins.iter().map(|b| b["runs"].as_u64().unwrap()).collect();
    assert_eq!(got, want);

    let depth_of: BTreeMap<i64, i64> = db(&whole)
        .prepare("SELECT run_id, depth FROM run_details")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    for d in st["depths"].as_array().unwrap() {
        for b in d["score_histogram"].as_array().unwrap() {
            let (from, to) = (b["from"].as_i64().unwrap(), b["to"].as_i64().unwrap());
            let n = runs
                .iter()
                .filter(|r| Some(depth_of[&r.0]) == d["depth"].as_i64())
                .filter(|r| (from..=to).contains(&r.3))
                .count();
            assert_eq!(b["runs"].as_u64().unwrap() as usize, n, "{d}");
        }
    }

    let names: Vec<String> =
        serde_json::from_str(&std::fs::read_to_string(whole.join("valuation_types.json")).unwrap())
            .unwrap();
    let step_width = st["by_step"][0]["to"].as_u64().unwrap() + 1;
    let mut buckets: BTreeMap<u64, (BTreeMap<String, u64>, Vec<i64>)> = BTreeMap::new();
    for row in read_rows(&whole) {
        let step = u32::from_le_bytes(row[4..8].try_into().unwrap()) as u64;
        let eval = i32::from_le_bytes(row[16..20].try_into().unwrap()) as i64;
        let b = buckets.entry((step / step_width).min(39)).or_default();
        *b.0.entry(names[row[23] as usize].clone()).or_default() += 1;
        b.1.push(eval);
    }
    let by_step = st["by_step"].as_array().unwrap();
    assert_eq!(by_step.len(), buckets.len());
    for (b, (k, (types, evals))) in by_step.iter().zip(&buckets) {
        assert_eq!(b["from"].as_u64().unwrap(), k * step_width);
        assert_eq!(b["rows"].as_u64().unwrap(), evals.len() as u64);
        let got: BTreeMap<String, u64> = b["rows_by_type"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.as_u64().unwrap()))
            .collect();
        assert_eq!(&got, types);
        let e = &b["board_eval"];
        assert_eq!(e["min"].as_i64().unwrap(), *evals.iter().min().unwrap());
        assert_eq!(e["max"].as_i64().unwrap(), *evals.iter().max().unwrap());
        let mean = evals.iter().sum::<i64>() as f64 / evals.len() as f64;
        assert!((e["mean"].as_f64().unwrap() - mean).abs() <= 1e-9 * mean.abs().max(1.0));
    }

    for (ty, e) in st["ev_legal_moves"].as_object().unwrap() {
        let hist = e["histogram"].as_array().unwrap();
        let total: u64 = hist.iter().map(|b| b["evs"].as_u64().unwrap()).sum();
        assert_eq!(total, e["evs"].as_u64().unwrap(), "{ty}");
        assert_eq!(hist[0]["from"], e["min"], "{ty}");
        assert_eq!(hist[hist.len() - 1]["to"], e["max"], "{ty}");
    }
}

/// A pack of the legacy packed 46-byte layout reads as its 48-byte original: the same numbers in
/// every figure but provenance.
#[test]
fn a_legacy_pack_reports_like_its_original() {
    let t = tempfile::tempdir().unwrap();
    let spec = t.path().join("spec");
    let legacy = t.path().join("legacy");
    pack(&fixture("raw"), &spec, &["--shard-rows", "1000"]);
    copy_tree(&spec, &legacy);
    make_legacy_pack(&legacy);
    let out = t.path().join("r.html");
    run_ok(&[
        "report",
        s(&spec),
        s(&legacy),
        "--output",
        s(&out),
        "--quiet",
    ]);
    let tables = tables(&std::fs::read_to_string(&out).unwrap());
    for (id, table) in &tables {
        if id == "session" || id == "commands" {
            continue;
        }
        assert!(
            !table.of("spec").is_empty() || id == "search-effort",
            "{id}"
        );
        assert_eq!(table.of("spec"), table.of("legacy"), "{id}");
    }
}

#[test]
fn the_search_statistics_of_pack_are_charted_by_their_median() {
    let t = tempfile::tempdir().unwrap();
    let kept = t.path().join("kept");
    pack(&fixture("raw"), &kept, &["--search-stats"]);
    let out = t.path().join("report.html");
    run_ok(&["report", s(&kept), "--output", s(&out)]);
    let html = std::fs::read_to_string(&out).unwrap();
    let st = stats_json(&kept, &[]);
    let depths = &st["search"]["depths"];
    assert!(
        depths.as_array().is_some_and(|d| !d.is_empty())
            && depths
                .as_array()
                .unwrap()
                .iter()
                .all(|d| d["median"].is_number()),
        "{depths}"
    );
    let tables = tables(&html);
    assert_rows(
        tables["search-effort"].of("kept"),
        rows_of(depths, &["depth", "rows", "sum", "mean", "median", "max"]),
        "search statistics",
    );
    let section = between(
        &html,
        "<section class=\"figure\" id=\"search-effort",
        "</section>",
    );
    assert!(
        section[0].contains("median nodes searched per move") && section[0].contains("<svg"),
        "{}",
        section[0]
    );
}

// ---------------------------------------------------------------------------------------------
// What a new user saw (issue 33): an empty findings chart on a fractional axis, cut-off axis
// labels, literal Markdown in notes, compared packs on different step buckets, bare counts.

/// `2240` → `2,240`.
fn with_commas(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The section of figure `id`.
fn section<'a>(html: &'a str, id: &str) -> &'a str {
    between(
        html,
        &format!("<section class=\"figure\" id=\"{id}\""),
        "</section>",
    )
    .first()
    .copied()
    .unwrap_or_else(|| panic!("no figure {id}"))
}

#[test]
fn nothing_to_show_is_a_sentence_and_notes_are_not_markdown() {
    let t = tempfile::tempdir().unwrap();
    let (whole, sharded) = two_packs(t.path());
    let out = t.path().join("report.html");
    let said = run_ok(&["report", s(&whole), s(&sharded), "--output", s(&out)]);
    let html = std::fs::read_to_string(&out).unwrap();
    let findings = section(&html, "findings");
    assert!(!findings.contains("<svg"), "an empty chart");
    assert!(
        findings.contains(
            "Nothing to show: the packs have no findings, no duplicate runs and no skipped runs."
        ),
        "{findings}"
    );
    let notes = between(&html, "<p class=\"note\">", "</p>");
    assert!(notes.len() >= 9);
    for note in &notes {
        assert!(!note.contains('`'), "Markdown left in a note: {note}");
    }
    assert!(html.contains("<code>pack --search-stats</code>"));
    let rows = stats_json(&whole, &[])["rows"].as_u64().unwrap();
    assert!(rows >= 1000);
    let rows = with_commas(rows);
    assert!(
        html.contains(&format!(" runs, {rows} rows, 1 shard")),
        "no separators"
    );
    assert!(
        said.contains(&format!("{} rows", with_commas(2 * 2240))),
        "{said}"
    );
}

#[test]
fn a_findings_chart_counts_in_whole_numbers() {
    let t = tempfile::tempdir().unwrap();
    let raw = t.path().join("raw");
    copy_tree(&fixture("raw/d6_10g_v1"), &raw);
    let sidecar = walk(&raw)
        .into_iter()
        .find(|p| p.to_string_lossy().ends_with(".meta.json"))
        .unwrap();
    std::fs::write(&sidecar, "{not json").unwrap();
    let p = t.path().join("p");
    pack(&raw, &p, &["--skip-invalid"]);
    let out = t.path().join("report.html");
    run_ok(&["report", s(&p), "--output", s(&out), "--quiet"]);
    let html = std::fs::read_to_string(&out).unwrap();
    let svg = between(section(&html, "findings"), "<svg", "</svg>");
    assert_eq!(svg.len(), 1, "one skipped run is drawn");
    let ticks: Vec<f64> = between(svg[0], "class=\"tick-label\">", "</text>")
        .into_iter()
        .filter_map(|t| t.parse().ok())
        .collect();
    assert_eq!(ticks, vec![0.0, 1.0], "a count axis of whole numbers");
}

#[test]
fn compared_packs_share_their_step_buckets() {
    let t = tempfile::tempdir().unwrap();
    let long = t.path().join("long");
    pack(&fixture("raw"), &long, &[]);
    let mut steps: Vec<i64> = runs_table(&long).iter().map(|r| r.2).collect();
    steps.sort_unstable();
    let short = t.path().join("short");
    // Runs at most 5/4 of the shortest: a longest run short enough for narrower buckets.
    let limit = format!("steps <= {}", steps[0] + steps[0] / 4);
    run_ok(&[
        "export",
        s(&long),
        "--format",
        "pack",
        "--output",
        s(&short),
        "--where",
        &limit,
        "--quiet",
    ]);
    // Alone, each pack sizes its buckets to its own longest run.
    let edges = |st: &Value| -> Vec<(String, String)> {
        st["by_step"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| (cell(&b["from"]), cell(&b["to"])))
            .collect()
    };
    let (alone_long, alone_short) = (
        edges(&stats_json(&long, &[])),
        edges(&stats_json(&short, &[])),
    );
    assert_ne!(alone_long[1], alone_short[1], "the packs would differ");
    let out = t.path().join("report.html");
    run_ok(&[
        "report",
        s(&long),
        s(&short),
        "--output",
        s(&out),
        "--quiet",
    ]);
    let html = std::fs::read_to_string(&out).unwrap();
    let mix = &tables(&html)["board-eval"];
    let on_page = |pack: &str| -> Vec<(String, String)> {
        mix.of(pack)
            .iter()
            .map(|r| (r[0].clone(), r[1].clone()))
            .collect()
    };
    let (page_long, page_short) = (on_page("long"), on_page("short"));
    assert_eq!(page_long, alone_long);
    assert_eq!(
        page_short[..],
        page_long[..page_short.len()],
        "the same buckets"
    );
    // And the charts of the valuation mix have the same categories.
    let charts = between(section(&html, "valuation-mix"), "<svg", "</svg>");
    let labels = |svg: &str| -> Vec<String> {
        between(svg, "class=\"tick-label\">", "</text>")
            .into_iter()
            .filter(|l| l.contains('–') || l.ends_with('+'))
            .map(str::to_string)
            .collect()
    };
    assert_eq!(charts.len(), 2);
    assert_eq!(labels(charts[0]), labels(charts[1]));
    assert!(labels(charts[0]).len() > page_short.len());
}

#[test]
fn every_axis_label_is_drawn_inside_its_chart() {
    if !Path::new(CHROMIUM).exists() {
        println!("skipped: chromium not installed ({CHROMIUM}; apt-get install -y chromium)");
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let (whole, sharded) = two_packs(t.path());
    let page = t.path().join("report.html");
    run_ok(&[
        "report",
        s(&whole),
        s(&sharded),
        "--output",
        s(&page),
        "--quiet",
    ]);
    // The page itself runs no script: a copy of it measures what the browser drew.
    let probe = t.path().join("probe.html");
    let html = std::fs::read_to_string(&page).unwrap();
    let script = r#"<script>
const out = [];
let labels = 0;
for (const svg of document.querySelectorAll("svg.chart")) {
  const box = svg.getBoundingClientRect();
  for (const label of svg.querySelectorAll(".axis-label")) {
    labels += 1;
    const b = label.getBoundingClientRect();
    if (b.top < box.top - 0.5 || b.bottom > box.bottom + 0.5 ||
        b.left < box.left - 0.5 || b.right > box.right + 0.5) {
      out.push(label.textContent);
    }
  }
}
document.body.setAttribute("data-labels", String(labels));
document.body.setAttribute("data-outside", JSON.stringify(out));
</script></body>"#;
    std::fs::write(&probe, html.replace("</body>", script)).unwrap();
    let loaded = chromium(
        &t.path().join("profile"),
        &["--dump-dom", &format!("file://{}", probe.display())],
    );
    assert!(loaded.status.success(), "{}", stderr(&loaded));
    let dom = String::from_utf8_lossy(&loaded.stdout);
    let labels: usize = between(&dom, "data-labels=\"", "\"")[0].parse().unwrap();
    assert!(labels >= 18, "{labels} labels measured");
    let outside = unescape(between(&dom, "data-outside=\"", "\"")[0]);
    assert_eq!(outside, "[]", "labels drawn past their chart's edge");
}
