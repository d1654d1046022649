//! `validate` is the strictest reader of a shard's `.npy` header: whatever it calls VALID, NumPy
//! (`np.load(mmap_mode="r")`), `Pack()` and the commands read identically; whatever NumPy
//! refuses or reads differently, it refuses. Checked against NumPy itself on generated header
//! mutations of a one-run pack, in this tool's layout and in the reference packer's (legacy
//! 46-byte rows, npyz's spelling, no recorded checksums so a header change is not a checksum
//! failure): spellings that mean the same shard (key order, quotes, whitespace, trailing
//! commas, type spellings, format versions 2.0 and 3.0, headers past 4,096 bytes) and lies or
//! malformations (shape as `500`, `[500]` or `(500)`, repeated and extra keys, dict-form
//! descrs, titles, unnamed fields, versions NumPy does not read, row counts that wrap the
//! size check, truncated and over-long headers, NUL bytes, comments).
//!
//! A fixed seed; `DATASET_PACKER_FUZZ_CASES=N` sets the random cases per layout (default 120).

mod common;
#[path = "common/reference.rs"]
mod reference;

use std::path::{Path, PathBuf};

use common::*;
use dataset_packer::format::npy;
use dataset_packer::rng::Xoshiro;

/// The parts of a header, to be spelled out by [`Header::bytes`].
#[derive(Clone, Debug)]
struct Header {
    version: (u8, u8),
    /// (key text, value text), in order.
    items: Vec<(String, String)>,
    lead: String,
    /// Between items (after each comma).
    sep: Vec<String>,
    dict_comma: bool,
    trail: String,
    /// Total header length (text bytes) to pad to with spaces.
    pad_to: Option<usize>,
    /// Added to the length field.
    len_lie: i64,
    /// Bytes of the file kept (a truncated header).
    cut: Option<usize>,
}

/// One field of a list-form descr.
#[derive(Clone, Debug)]
struct FieldSpec {
    name: String,
    ty: String,
    shape: Option<String>,
    list: bool,
}

impl FieldSpec {
    fn text(&self) -> String {
        let (open, close) = if self.list { ("[", "]") } else { ("(", ")") };
        match &self.shape {
            Some(shape) => format!("{open}{}, {}, {shape}{close}", self.name, self.ty),
            None => format!("{open}{}, {}{close}", self.name, self.ty),
        }
    }
}

fn descr_text(fields: &[FieldSpec], trailing_comma: bool) -> String {
    let body: Vec<String> = fields.iter().map(FieldSpec::text).collect();
    format!(
        "[{}{}]",
        body.join(", "),
        if trailing_comma { ", " } else { "" }
    )
}

impl Header {
    fn bytes(&self) -> Vec<u8> {
        let mut dict = format!("{}{{", self.lead);
        for (i, (k, v)) in self.items.iter().enumerate() {
            if i > 0 {
                dict.push(',');
                dict.push_str(self.sep.get(i).map_or(" ", |s| s.as_str()));
            }
            dict.push_str(&format!("{k}: {v}"));
        }
        if self.dict_comma {
            dict.push_str(", ");
        }
        dict.push('}');
        let mut text: Vec<u8> = if self.version.0 == 3 {
            dict.into_bytes()
        } else {
            // Latin-1 where the text allows it, else its UTF-8 bytes (a header that lies).
            match dict
                .chars()
                .map(|c| u8::try_from(u32::from(c)).ok())
                .collect()
            {
                Some(latin1) => latin1,
                None => dict.into_bytes(),
            }
        };
        let trail = self.trail.as_bytes();
        let prefix = if self.version == (1, 0) || self.version.0 == 1 {
            10
        } else {
            12
        };
        let target = self
            .pad_to
            .unwrap_or_else(|| (text.len() + trail.len() + prefix).div_ceil(64) * 64 - prefix);
        while text.len() + trail.len() < target {
            text.push(b' ');
        }
        text.extend_from_slice(trail);
        let len = (text.len() as i64 + self.len_lie).max(0) as u64;
        let mut out = b"\x93NUMPY".to_vec();
        out.extend_from_slice(&[self.version.0, self.version.1]);
        if prefix == 10 {
            out.extend_from_slice(&(len as u16).to_le_bytes());
        } else {
            out.extend_from_slice(&(len as u32).to_le_bytes());
        }
        out.extend_from_slice(&text);
        out
    }
}

/// A pack of one run in a layout, without recorded checksums, and what its shard holds.
struct Base {
    layout: &'static str,
    dir: PathBuf,
    rows: u64,
    data: Vec<u8>,
    fields: Vec<FieldSpec>,
}

fn base_fields(legacy: bool) -> Vec<FieldSpec> {
    let one = if legacy { "'<u1'" } else { "'|u1'" };
    let mut fields = vec![
        ("run_id", "'<u4'"),
        ("step_index", "'<u4'"),
        ("board", "'<u8'"),
        ("board_eval", "'<i4'"),
        ("tile_65536_mask", "'<u2'"),
        ("move_dir", one),
        ("valuation_type", one),
        ("ev_legal", one),
        ("max_rank", one),
    ];
    if !legacy {
        fields.push(("", "'|V2'"));
    }
    fields.push(("seed", "'<u4'"));
    let mut out: Vec<FieldSpec> = fields
        .into_iter()
        .map(|(n, t)| FieldSpec {
            name: format!("'{n}'"),
            ty: t.to_string(),
            shape: None,
            list: false,
        })
        .collect();
    out.push(FieldSpec {
        name: "'branch_evs'".into(),
        ty: "'<f4'".into(),
        shape: Some("(4,)".into()),
        list: false,
    });
    out
}

impl Base {
    fn new(root: &Path, layout: &'static str) -> Base {
        let input = root.join("one-run");
        if !input.exists() {
            std::fs::create_dir_all(&input).unwrap();
            let raw = fixture("raw/d6_10g_v1");
            for ext in ["jsonl.gz", "meta.json"] {
                let name = format!("depth06_worker00_seed0272350805_game000000.{ext}");
                std::fs::copy(raw.join(&name), input.join(&name)).unwrap();
            }
        }
        let ours = root.join("ours");
        if !ours.exists() {
            pack(&input, &ours, &[]);
        }
        let dir = root.join(layout);
        if layout == "aligned" {
            copy_tree(&ours, &dir);
            rusqlite::Connection::open(dir.join("metadata.db"))
                .unwrap()
                .execute_batch("DROP TABLE shards")
                .unwrap();
        } else {
            reference::make_reference_pack(&ours, &dir, None);
        }
        let shard = std::fs::read(dir.join("steps.npy")).unwrap();
        let header = npy::parse_header(&shard).unwrap();
        Base {
            layout,
            rows: header.rows,
            data: shard[header.data_offset..].to_vec(),
            fields: base_fields(layout == "legacy"),
            dir,
        }
    }

    fn header(&self) -> Header {
        Header {
            version: (1, 0),
            items: vec![
                ("'descr'".into(), descr_text(&self.fields, false)),
                ("'fortran_order'".into(), "False".into()),
                ("'shape'".into(), format!("({},)", self.rows)),
            ],
            lead: String::new(),
            sep: vec![],
            dict_comma: true,
            trail: "\n".into(),
            pad_to: None,
            len_lie: 0,
            cut: None,
        }
    }
}

fn pick<'a>(rng: &mut Xoshiro, from: &[&'a str]) -> &'a str {
    from[rng.below(from.len() as u64) as usize]
}

fn set(h: &mut Header, key: &str, value: String) {
    for (k, v) in &mut h.items {
        if k.trim_matches(['\'', '"']) == key {
            *v = value.clone();
        }
    }
}

/// One random mutation of `h` (whose descr is `fields`), named for the failure message.
fn mutate(rng: &mut Xoshiro, base: &Base, h: &mut Header, fields: &mut Vec<FieldSpec>) -> String {
    let r = base.rows;
    let kind = rng.below(22);
    match kind {
        0 => {
            let shape = pick(
                rng,
                &[
                    "(R,)", "R", "[R]", "(R, )", "(R)", "((R,))", "( R , )", "(R, 1)", "(1, R)",
                    "()", "(True,)", "(-1,)", "(W60,)", "(W63,)", "(W64,)", "(S,)", "(P,)", "(0,)",
                    "(RL,)", "(0R,)", "(R.0,)", "(0x1,)", "(R_0,)", "(R,)\t",
                ],
            );
            let v = shape
                .replace("W60", &(r + (1 << 60)).to_string())
                .replace("W63", &(r + (1 << 63)).to_string())
                .replace("W64", &(u128::from(r) + (1u128 << 64)).to_string())
                .replace('S', &(r - 1).to_string())
                .replace('P', &(r + 1).to_string())
                .replace('R', &r.to_string());
            set(h, "shape", v.clone());
            format!("shape {v}")
        }
        1 => {
            rng.shuffle(&mut h.items);
            "key order".into()
        }
        2 => {
            for (k, _) in &mut h.items {
                *k = k.replace('\'', "\"");
            }
            for f in fields.iter_mut() {
                f.ty = f.ty.replace('\'', "\"");
                if rng.below(2) == 0 {
                    f.name = f.name.replace('\'', "\"");
                }
            }
            "double quotes".into()
        }
        3 => {
            let ws = [" ", "", "\t", "\n", "  ", "\r\n", "\x0c", " \n   "];
            h.sep = (0..4).map(|_| pick(rng, &ws).to_string()).collect();
            h.lead = pick(rng, &["", " ", "\t", "\n", " \n", "\x0c"]).into();
            h.trail = pick(
                rng,
                &[
                    "\n", "", "\r\n", "\x0c\n", "\n\n", " # c\n", "\x0b\n", "\0\0\n", "\n  ",
                ],
            )
            .into();
            format!("whitespace {:?} {:?} {:?}", h.lead, h.sep, h.trail)
        }
        4 => {
            h.dict_comma = !h.dict_comma;
            "dict trailing comma".into()
        }
        5 => {
            let (k, v) = pick(
                rng,
                &[
                    "shape|(D,)",
                    "shape|(R,)",
                    "descr|'<f8'",
                    "fortran_order|False",
                    "fortran_order|True",
                ],
            )
            .split_once('|')
            .unwrap();
            let v = v
                .replace('D', &(r / 2).to_string())
                .replace('R', &r.to_string());
            let at = rng.below(h.items.len() as u64 + 1) as usize;
            h.items.insert(at, (format!("'{k}'"), v.clone()));
            format!("repeated key {k}: {v}")
        }
        6 => {
            let (k, v) = pick(
                rng,
                &[
                    "'extra'|1",
                    "'Shape'|(3,)",
                    "1|2",
                    "'descr '|'<u4'",
                    "None|None",
                ],
            )
            .split_once('|')
            .unwrap();
            h.items.push((k.into(), v.into()));
            format!("extra key {k}")
        }
        7 => {
            let i = rng.below(h.items.len() as u64) as usize;
            let gone = h.items.remove(i);
            format!("missing key {}", gone.0)
        }
        8 => {
            let v = pick(rng, &["True", "0", "1", "'False'", "None", "(False)"]);
            set(h, "fortran_order", v.into());
            format!("fortran_order {v}")
        }
        9 => {
            let mut offset = 0;
            let mut names = vec![];
            let mut formats = vec![];
            let mut offsets = vec![];
            for f in fields.iter() {
                let size = type_size(&f.ty) * if f.shape.is_some() { 4 } else { 1 };
                if f.name != "''" {
                    names.push(f.name.clone());
                    formats.push(match &f.shape {
                        Some(s) => format!("({}, {s})", f.ty),
                        None => f.ty.clone(),
                    });
                    offsets.push(offset.to_string());
                }
                offset += size;
            }
            let dict = format!(
                "{{'names': [{}], 'formats': [{}], 'offsets': [{}], 'itemsize': {offset}}}",
                names.join(", "),
                formats.join(", "),
                offsets.join(", ")
            );
            set(h, "descr", dict);
            "dict-form descr".into()
        }
        10 => {
            let f = &mut fields[rng.below(3) as usize];
            f.name = format!("('title', {})", f.name);
            "field title".into()
        }
        11 => {
            let Some(pad) = fields.iter().position(|f| f.name == "''") else {
                fields.insert(
                    9,
                    FieldSpec {
                        name: "''".into(),
                        ty: "'|V2'".into(),
                        shape: None,
                        list: false,
                    },
                );
                return "padding added to the legacy layout".into();
            };
            let what = pick(rng, &["drop", "split", "<u2", "named", "<V2", "V1"]);
            match what {
                "drop" => {
                    fields.remove(pad);
                }
                "split" => {
                    fields[pad].ty = "'|V1'".into();
                    fields.insert(pad, fields[pad].clone());
                }
                "named" => fields[pad].name = "'pad'".into(),
                "<u2" => fields[pad].ty = "'<u2'".into(),
                "<V2" => fields[pad].ty = "'<V2'".into(),
                _ => fields[pad].ty = "'|V1'".into(),
            }
            format!("padding {what}")
        }
        12 => {
            let i = rng.below(fields.len() as u64) as usize;
            let ty = fields[i].ty.trim_matches(['\'', '"']).to_string();
            let size = &ty[2..];
            let kind = &ty[1..2];
            let spelled = pick(rng, &["K", "=K", "|K", ">K", "<K", "name", "short"]);
            fields[i].ty = match spelled {
                "name" => format!(
                    "'{}{}'",
                    match kind {
                        "u" => "uint",
                        "i" => "int",
                        "f" => "float",
                        _ => "void",
                    },
                    size.parse::<u32>().map_or(0, |s| s * 8)
                ),
                "short" => pick(rng, &["'I'", "'B'", "'b1'", "'i1'", "'?'", "'u'"]).into(),
                other => format!("'{}'", other.replace('K', &format!("{kind}{size}"))),
            };
            format!("type of {} as {}", fields[i].name, fields[i].ty)
        }
        13 => {
            let shape = pick(
                rng,
                &["(4,)", "4", "[4]", "(4)", "(2, 2)", "(4, 1)", "()", "(4L,)"],
            );
            let last = fields.len() - 1;
            fields[last].shape = Some(shape.into());
            format!("sub-array shape {shape}")
        }
        14 => {
            let i = rng.below(fields.len() as u64) as usize;
            fields[i].list = true;
            "field as a list".into()
        }
        15 => {
            let spelled = pick(
                rng,
                &[
                    "'r\\x75n_id'",
                    "'run\\u005fid'",
                    "'run\\U0000005fid'",
                    "\"run_id\"",
                    "'run\\_id'",
                    "'run_id\\\n'",
                    "'run' '_id'",
                    "u'run_id'",
                    "b'run_id'",
                    "'ж'",
                    "'é'",
                ],
            );
            fields[0].name = spelled.into();
            format!("name {spelled}")
        }
        16 => {
            let v = pick(
                rng,
                &["1.0", "2.0", "3.0", "1.1", "0.0", "4.0", "3.1", "2.1"],
            );
            let (a, b) = v.split_once('.').unwrap();
            h.version = (a.parse().unwrap(), b.parse().unwrap());
            format!("version {v}")
        }
        17 => {
            let len = [4200usize, 5000, 9990, 10001, 12000, 70000][rng.below(6) as usize];
            h.pad_to = Some(len);
            if len > 65000 && h.version.0 == 1 {
                h.version = (2, 0);
            }
            format!("header of {len} bytes")
        }
        18 => {
            h.len_lie = [-1i64, 1, -8, 64, 1 << 20][rng.below(5) as usize];
            format!("length field off by {}", h.len_lie)
        }
        19 => {
            h.cut = Some(rng.below(200) as usize);
            format!("file cut at {:?}", h.cut)
        }
        20 => {
            let i = rng.below(fields.len() as u64) as usize;
            let name = pick(rng, &["'é'", "'ж'", "'Run_id'", "'run_id '", "''"]);
            fields[i].name = name.into();
            format!("field {i} renamed {name}")
        }
        _ => {
            let descr = descr_text(fields, true);
            set(h, "descr", descr);
            "descr trailing comma".into()
        }
    }
}

fn type_size(ty: &str) -> usize {
    ty.trim_matches(['\'', '"'])[2..].parse().unwrap_or(1)
}

/// A case: the folder of a pack whose shard has the header `h` over the base's rows.
fn write_case(base: &Base, dir: &Path, h: &Header) {
    copy_tree(&base.dir, dir);
    let mut bytes = h.bytes();
    bytes.extend_from_slice(&base.data);
    if let Some(cut) = h.cut {
        bytes.truncate(cut);
    }
    std::fs::write(dir.join("steps.npy"), bytes).unwrap();
}

/// What the tool makes of the case: Ok(rows) when `validate` finds the shard's header
/// readable (VALID for this layout; for the legacy layout, only the "legacy packed shard"
/// failure, as that layout always has), Err(its output) otherwise.
fn tool_reading(base: &Base, dir: &Path) -> Result<u64, String> {
    let out = run(&["validate", s(dir), "--json", "--quiet"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let report: serde_json::Value = match serde_json::from_str(&text) {
        Ok(v) => v,
        Err(_) => return Err(format!("{text}{}", stderr(&out))),
    };
    let failed: Vec<&serde_json::Value> = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] == "failed")
        .collect();
    let legacy_only = failed.len() == 1
        && failed[0]["failures"] == 1
        && failed[0]["examples"][0]
            .as_str()
            .is_some_and(|e| e.contains("legacy packed 46-byte shard"));
    let readable = match base.layout {
        "aligned" => out.status.success() && failed.is_empty(),
        _ => legacy_only,
    };
    if readable {
        Ok(report["rows"].as_u64().unwrap())
    } else {
        Err(text)
    }
}

/// The rows `stats` reads (another command over the same shards), or its error.
fn stats_rows(dir: &Path) -> Result<u64, String> {
    let out = run(&["stats", s(dir), "--json"]);
    if !out.status.success() {
        return Err(stderr(&out));
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    Ok(v["rows"].as_u64().unwrap())
}

struct Case {
    base: usize,
    what: String,
    dir: PathBuf,
    must_read: bool,
}

/// Spellings of the same shard every reader must read (NumPy reads them all).
fn same_shard_spellings(base: &Base) -> Vec<(String, Header)> {
    let mut out = vec![];
    let mut h = base.header();
    out.push(("as written".into(), h.clone()));
    h.items.reverse();
    out.push(("keys reversed".into(), h.clone()));
    let mut h = base.header();
    h.sep = vec!["".into(), "\n  ".into(), "\t".into()];
    h.dict_comma = false;
    h.trail = "  \r\n".into();
    out.push(("whitespace".into(), h));
    for (v, name) in [((2u8, 0u8), "2.0"), ((3, 0), "3.0")] {
        let mut h = base.header();
        h.version = v;
        out.push((format!("version {name}"), h));
    }
    for len in [4200usize, 9990] {
        let mut h = base.header();
        h.pad_to = Some(len);
        out.push((format!("header of {len} bytes"), h));
    }
    let mut h = base.header();
    set(&mut h, "shape", format!("(({},))", base.rows));
    out.push(("shape in parentheses".into(), h));
    let mut h = base.header();
    for (k, _) in &mut h.items {
        *k = k.replace('\'', "\"");
    }
    out.push(("double-quoted keys".into(), h));
    out
}

#[test]
fn validate_is_the_strictest_reader() {
    let tmp = tempfile::tempdir().unwrap();
    let bases = [
        Base::new(tmp.path(), "aligned"),
        Base::new(tmp.path(), "legacy"),
    ];
    let n: u64 = std::env::var("DATASET_PACKER_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(120);
    let mut rng = Xoshiro::new(0x5eed_0030);
    let mut cases: Vec<Case> = vec![];
    for (b, base) in bases.iter().enumerate() {
        for (what, h) in same_shard_spellings(base) {
            let dir = tmp.path().join(format!("case-{}", cases.len()));
            write_case(base, &dir, &h);
            cases.push(Case {
                base: b,
                what,
                dir,
                must_read: true,
            });
        }
        for _ in 0..n {
            let mut h = base.header();
            let mut fields = base.fields.clone();
            let mut what = vec![];
            for _ in 0..=rng.below(3) {
                what.push(mutate(&mut rng, base, &mut h, &mut fields));
            }
            // The list-form descr (not a repeated or extra key's value) spells the fields.
            for (k, v) in &mut h.items {
                if k.contains("descr") && !k.contains(' ') && v.starts_with('[') {
                    *v = descr_text(&fields, v.ends_with(", ]"));
                }
            }
            let dir = tmp.path().join(format!("case-{}", cases.len()));
            write_case(base, &dir, &h);
            cases.push(Case {
                base: b,
                what: what.join("; "),
                dir,
                must_read: false,
            });
        }
    }

    let list: Vec<serde_json::Value> = cases
        .iter()
        .map(|c| {
            serde_json::json!({
                "dir": c.dir,
                "layout": bases[c.base].layout,
                "original": bases[c.base].dir.join("steps.npy"),
            })
        })
        .collect();
    let list_path = tmp.path().join("cases.json");
    std::fs::write(&list_path, serde_json::to_vec(&list).unwrap()).unwrap();
    let readings = python_ok("npy_headers.py", &[s(&list_path)]);
    let readings: Vec<serde_json::Value> = readings
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(readings.len(), cases.len());

    let (mut read, mut stricter) = (0, 0);
    for (case, theirs) in cases.iter().zip(&readings) {
        let base = &bases[case.base];
        let numpy = theirs["numpy"].as_str().unwrap();
        let python = theirs["pack"].as_str().unwrap();
        let ours = tool_reading(base, &case.dir);
        let context = || {
            format!(
                "{} layout, {}: validate {ours:?}\nnumpy: {numpy}\nPack(): {python}\nheader: {:?}",
                base.layout,
                case.what,
                String::from_utf8_lossy(
                    &std::fs::read(case.dir.join("steps.npy")).unwrap()
                        [..400
                            .min(std::fs::metadata(case.dir.join("steps.npy")).unwrap().len()
                                as usize)]
                )
            )
        };
        match &ours {
            Ok(rows) => {
                read += 1;
                assert_eq!(numpy, "same", "{}", context());
                assert_eq!(python, "same", "{}", context());
                assert_eq!(*rows, base.rows, "{}", context());
                assert_eq!(stats_rows(&case.dir), Ok(base.rows), "{}", context());
            }
            Err(report) => {
                assert!(!case.must_read, "{}", context());
                assert!(
                    python.starts_with("refused: ") && python.contains("steps.npy"),
                    "Pack() reads what validate refuses: {}",
                    context()
                );
                assert!(
                    report.contains("steps.npy"),
                    "the refusal names the shard: {}",
                    context()
                );
                let stats = stats_rows(&case.dir);
                assert!(
                    stats.as_ref().is_err_and(|e| e.contains("steps.npy")),
                    "stats reads what validate refuses ({stats:?}): {}",
                    context()
                );
                if numpy == "same" {
                    stricter += 1;
                    println!(
                        "refused, though NumPy reads it: {} layout, {}",
                        base.layout, case.what
                    );
                }
            }
        }
    }
    println!(
        "{} header cases ({n} random per layout): {read} read by every reader, {} refused by \
         every reader ({stricter} of them read by NumPy as the same shard)",
        cases.len(),
        cases.len() - read,
    );
}

/// A 500-row shard whose header claims 500 + 2^60 rows: rows × 48 wraps to the real size in
/// 64 bits. Every command refuses the pack cleanly (exit 1, no abort, no allocation of the
/// claimed size), naming the shard; with recorded checksums `validate` reports the mismatch.
#[test]
fn a_row_count_that_wraps_is_refused_by_every_command() {
    let tmp = tempfile::tempdir().unwrap();
    let good = tmp.path().join("good");
    pack(&fixture("raw"), &good, &["--shard-rows", "500"]);
    let lie = 500 + (1u64 << 60);
    assert_eq!(lie.wrapping_mul(48), 500 * 48, "the lie wraps");
    for checksums in [true, false] {
        let p = tmp.path().join(format!("lying-{checksums}"));
        copy_tree(&good, &p);
        let shard = p.join("steps-00000.npy");
        let mut bytes = std::fs::read(&shard).unwrap();
        bytes[..npy::HEADER_LEN].copy_from_slice(&npy::header(lie));
        std::fs::write(&shard, bytes).unwrap();
        if !checksums {
            rusqlite::Connection::open(p.join("metadata.db"))
                .unwrap()
                .execute_batch("DROP TABLE shards")
                .unwrap();
        }
        let out = tmp.path().join(format!("out-{checksums}"));
        let commands: [&[&str]; 9] = [
            &["validate", s(&p)],
            &["validate", s(&p), "--deep"],
            &["stats", s(&p)],
            &["show", s(&p), "--run", "0"],
            &["merge", s(&p), "--output", s(&out)],
            &["shuffle", s(&p), "--output", s(&out)],
            &["export", s(&p), "--format", "jsonl", "--output", s(&out)],
            &["export", s(&p), "--format", "pack", "--output", s(&out)],
            &["attach", s(&p), "--name", "x", "--from", s(&shard)],
        ];
        for args in commands {
            let o = run(args);
            let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), stderr(&o));
            assert_eq!(o.status.code(), Some(1), "{args:?} ({checksums}): {text}");
            assert!(
                text.contains("steps-00000.npy") && text.contains("1152921504606847476 rows"),
                "{args:?} ({checksums}): {text}"
            );
            assert!(!out.exists(), "{args:?} wrote {}", out.display());
        }
        let validate = String::from_utf8(run(&["validate", s(&p), "--deep"]).stdout).unwrap();
        assert_eq!(
            validate.contains("steps-00000.npy: does not match its record"),
            checksums,
            "{validate}"
        );
        let python = std::process::Command::new(python())
            .args([
                "-c",
                "import sys, dataset_packer; dataset_packer.Pack(sys.argv[1])",
            ])
            .arg(&p)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&python.stderr);
        assert!(
            err.contains("PackError") && err.contains("steps-00000.npy"),
            "{err}"
        );
    }
}
