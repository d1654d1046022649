//! The reading operations as a library: `dataset_packer::export`, `stats` and `report` with
//! their default options write what the binary writes for the same arguments, byte for byte
//! (a pack's tables compared without what differs by design: its session, its versions and
//! its pack_id), and their errors carry a kind a program can match.
//!
//! Errors, as the library decides them: a selection SQLite cannot run is `InvalidInput` about
//! the option `selection` (bad input, exit code 1 from the binary, as before); an output that exists
//! is `Refused` about `overwrite`; a path that is not a pack is `NotAPack`.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use dataset_packer::{
    ErrorKind, ExportFormat, ExportOptions, Param, ReportOptions, StatsOptions, export, report,
    stats,
};

/// A small pack with the `search` companion family, in shards of 500 rows.
fn source(t: &Path) -> PathBuf {
    let p = t.join("src");
    pack(
        &fixture("raw"),
        &p,
        &["--search-stats", "--shard-rows", "500"],
    );
    p
}

/// `dataset-packer export PACK --output OUTPUT --quiet EXTRA…`.
fn cli_export(pack: &Path, output: &Path, extra: &[&str]) -> String {
    let mut args = vec!["export", s(pack), "--output", s(output), "--quiet"];
    args.extend_from_slice(extra);
    run_ok(&args)
}

/// Every file below `dir` (or `dir` itself, a file), by path relative to it, with its bytes.
fn tree_bytes(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    if dir.is_file() {
        return vec![(PathBuf::new(), std::fs::read(dir).unwrap())];
    }
    walk(dir)
        .into_iter()
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap();
            (p.strip_prefix(dir).unwrap().to_path_buf(), bytes)
        })
        .collect()
}

/// Every table of a pack's metadata.db as text, except `session` and `versions` (the command
/// line, the time and the pack_id); `session` is compared without those keys.
fn tables(pack: &Path) -> Vec<String> {
    let db = db(pack);
    let names: Vec<String> = db
        .prepare(
            "SELECT name FROM sqlite_master WHERE type = 'table' \
             AND name NOT IN ('session', 'versions') ORDER BY name",
        )
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert!(names.iter().any(|t| t == "runs"), "{names:?}");
    let mut out: Vec<String> = names
        .iter()
        .map(|t| {
            format!(
                "{t}: {}",
                rows(&db, &format!("SELECT * FROM {t} ORDER BY 1"))
            )
        })
        .collect();
    out.push(format!(
        "session: {}",
        rows(
            &db,
            "SELECT * FROM session WHERE meta_key NOT IN \
             ('command_line', 'created_utc', 'pack_id') ORDER BY 1"
        )
    ));
    out
}

fn rows(db: &rusqlite::Connection, sql: &str) -> String {
    let mut stmt = db.prepare(sql).unwrap();
    let n = stmt.column_count();
    stmt.query_map([], |r| {
        Ok((0..n)
            .map(|i| format!("{:?}", r.get_ref(i).unwrap()))
            .collect::<Vec<_>>()
            .join("|"))
    })
    .unwrap()
    .map(Result::unwrap)
    .collect::<Vec<_>>()
    .join("\n")
}

#[test]
fn export_writes_what_the_binary_writes() {
    let t = tempfile::tempdir().unwrap();
    let src = source(t.path());
    let (cli, lib) = (t.path().join("cli"), t.path().join("lib"));
    std::fs::create_dir_all(&cli).unwrap();
    std::fs::create_dir_all(&lib).unwrap();

    // JSONL and Parquet, one file each: the format from the name, every run.
    for name in ["all.jsonl.gz", "all.jsonl", "all.parquet"] {
        cli_export(&src, &cli.join(name), &[]);
        let summary = export(&src, lib.join(name), &ExportOptions::default()).unwrap();
        assert_eq!((summary.runs, summary.files), (10, 1), "{name}");
        assert_eq!(summary.selection, "all runs");
        assert_eq!(
            tree_bytes(&cli.join(name)),
            tree_bytes(&lib.join(name)),
            "{name}"
        );
    }
    // Folders: JSONL per run, Parquet parts, with run ids and SQL with a parameter.
    cli_export(
        &src,
        &cli.join("runs"),
        &["--format", "jsonl", "--runs", "0-3,7"],
    );
    let options = ExportOptions::default()
        .format(ExportFormat::Jsonl)
        .runs("0-3,7");
    let summary = export(&src, lib.join("runs"), &options).unwrap();
    assert_eq!((summary.runs, summary.files), (5, 10));
    cli_export(
        &src,
        &cli.join("parts"),
        &[
            "--format",
            "parquet",
            "--shard-rows",
            "600",
            "--run-columns",
            "--where",
            "max_score > ?",
            "--param",
            "2000",
        ],
    );
    let options = ExportOptions::default()
        .format(ExportFormat::Parquet)
        .shard_rows(600)
        .run_columns(true)
        .select_sql("max_score > ?")
        .param(Param::parse("2000").unwrap());
    let summary = export(&src, lib.join("parts"), &options).unwrap();
    assert_eq!(summary.selection, "--where max_score > ? --param 2000");
    for name in ["runs", "parts"] {
        let (a, b) = (tree_bytes(&cli.join(name)), tree_bytes(&lib.join(name)));
        assert!(a.len() > 2, "{name}: {} files", a.len());
        assert_eq!(a, b, "{name}");
    }

    // A pack: the same shards, companion files and tables.
    let sql = "depth IS NULL OR max_score > 1000";
    cli_export(
        &src,
        &cli.join("pack"),
        &["--format", "pack", "--where", sql],
    );
    let options = ExportOptions::default()
        .format(ExportFormat::Pack)
        .select_sql(sql);
    let summary = export(&src, lib.join("pack"), &options).unwrap();
    assert!(summary.runs > 0 && summary.files > 1, "{summary:?}");
    let arrays = |p: &Path| files(p, |n| n.ends_with(".npy") || n == "valuation_types.json");
    let (a, b) = (arrays(&cli.join("pack")), arrays(&lib.join("pack")));
    assert!(a.iter().any(|(n, _)| n.starts_with("search")), "{a:?}");
    assert_eq!(a, b);
    assert_eq!(tables(&cli.join("pack")), tables(&lib.join("pack")));
    // The library records the command line it is given.
    let own = t.path().join("own");
    let options = options.command_line("my-trainer --prepare".into());
    export(&src, &own, &options).unwrap();
    assert_eq!(
        session_value(&own, "command_line").as_deref(),
        Some("my-trainer --prepare")
    );
}

/// `stats --json` text without its `elapsed_s` (the one figure that differs run to run).
fn without_elapsed(json: &str) -> String {
    let at = json
        .find("\"elapsed_s\":")
        .expect("stats JSON has elapsed_s");
    let end = at + json[at..].find([',', '}']).unwrap();
    format!("{}{}", &json[..at], &json[end..])
}

#[test]
fn stats_figures_are_what_the_binary_prints() {
    let t = tempfile::tempdir().unwrap();
    let src = source(t.path());
    // The text, not values parsed back: the figures must print to the same bytes.
    let cli = |extra: &[&str]| {
        let mut args = vec!["stats", s(&src), "--json"];
        args.extend_from_slice(extra);
        without_elapsed(run_ok(&args).trim_end())
    };
    let lib = |options: &StatsOptions| {
        let figures = stats(&src, options).unwrap();
        let text = without_elapsed(&figures.to_json().to_string());
        (figures, text)
    };
    let (all, json) = lib(&StatsOptions::default());
    assert!(
        json == cli(&[]),
        "stats --json and stats().to_json() differ"
    );
    assert_eq!((all.runs, all.rows), (10, 2240));
    let (some, json) = lib(&StatsOptions::default()
        .select_sql("SELECT id FROM runs WHERE max_score > :min")
        .param(Param::parse("min=3000").unwrap())
        .workers(1));
    let args = [
        "--where",
        "SELECT id FROM runs WHERE max_score > :min",
        "--param",
        "min=3000",
        "--workers",
        "1",
    ];
    assert!(json == cli(&args), "with a selection, they differ");
    assert!(json.contains("\"where\":\"SELECT id FROM runs"), "{json}");
    assert!(some.runs < all.runs && some.rows < all.rows);
}

#[test]
fn report_writes_the_page_the_binary_writes() {
    let t = tempfile::tempdir().unwrap();
    let src = source(t.path());
    let (cli, lib) = (t.path().join("cli.html"), t.path().join("lib.html"));
    run_ok(&["report", s(&src), "--output", s(&cli), "--quiet"]);
    let summary = report(std::slice::from_ref(&src), &lib, &ReportOptions::default()).unwrap();
    assert_eq!((summary.packs, summary.rows), (1, 2240));
    // The same page but for the line saying when and by what command it was made.
    let page = |p: &Path| {
        let html = std::fs::read_to_string(p).unwrap();
        let (head, rest) = html.split_once("Made ").unwrap();
        let (_, tail) = rest.split_once("</code>").unwrap();
        format!("{head}{tail}")
    };
    assert_eq!(page(&cli), page(&lib));
    assert_eq!(summary.bytes, std::fs::metadata(&lib).unwrap().len());
}

#[test]
fn errors_have_kinds_a_program_can_match() {
    let t = tempfile::tempdir().unwrap();
    let src = source(t.path());
    let missing = t.path().join("no-such-pack");
    let out = t.path().join("out.parquet");

    let e = export(&missing, &out, &ExportOptions::default()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotAPack, "{e:?}");
    assert!(e.to_string().contains("no-such-pack"), "{e}");
    let e = stats(&missing, &StatsOptions::default()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotAPack, "{e:?}");
    let e = report(
        &[missing],
        t.path().join("r.html"),
        &ReportOptions::default(),
    )
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotAPack, "{e:?}");

    // Bad SQL is the caller's input, about the option `selection`; nothing is written.
    let bad = ExportOptions::default().select_sql("nope = 1");
    let e = export(&src, &out, &bad).unwrap_err();
    assert_eq!(
        (e.kind(), e.option()),
        (ErrorKind::InvalidInput, Some("selection"))
    );
    assert!(format!("{e:?}").contains("no column nope"), "{e:?}");
    let e = stats(&src, &StatsOptions::default().select_sql("nope = 1")).unwrap_err();
    assert_eq!(
        (e.kind(), e.option()),
        (ErrorKind::InvalidInput, Some("selection"))
    );
    let e = stats(&src, &StatsOptions::default().select_sql("max_score < 0")).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e:?}");
    assert!(!out.exists());

    // Options the library will not act on: refused, naming the option, never a flag.
    export(&src, &out, &ExportOptions::default()).unwrap();
    let e = export(&src, &out, &ExportOptions::default()).unwrap_err();
    assert_eq!(
        (e.kind(), e.option()),
        (ErrorKind::Refused, Some("overwrite"))
    );
    assert!(!e.to_string().contains("--"), "{e}");
    export(&src, &out, &ExportOptions::default().overwrite(true)).unwrap();
    let e = export(&src, t.path().join("folder"), &ExportOptions::default()).unwrap_err();
    assert_eq!((e.kind(), e.option()), (ErrorKind::Refused, Some("format")));
    let e = export(
        &src,
        &src,
        &ExportOptions::default().format(ExportFormat::Pack),
    )
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Refused, "{e:?}");
    let runs = ExportOptions::default().runs("0,99");
    let e = export(&src, t.path().join("x.jsonl"), &runs).unwrap_err();
    assert_eq!(
        (e.kind(), e.option()),
        (ErrorKind::InvalidInput, Some("runs"))
    );
}
