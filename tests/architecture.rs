//! The layout docs/architecture.md describes, held: no two modules of the crate import each
//! other, directly or through others (the module graph has no cycle), and the format contract
//! (`src/format/`) and the naming rules (`src/pack/files.rs`) import nothing of the pack
//! machinery. Imports are read from the source: every `crate::…` and `super::…` path outside
//! comments and unit tests.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Module name (`raw::row`, `cmd::pack`) → its source without comments and unit tests.
fn modules() -> BTreeMap<String, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = BTreeMap::new();
    let mut stack = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let rel = path.strip_prefix(&root).unwrap().with_extension("");
            let rel = rel.to_str().unwrap().replace('/', "::");
            let name = rel.strip_suffix("::mod").unwrap_or(&rel).to_string();
            if name == "main" || name == "lib" {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let code = text.split("#[cfg(test)]\nmod tests").next().unwrap();
            let code: Vec<&str> = code
                .lines()
                .map(|l| l.split("//").next().unwrap())
                .collect();
            out.insert(name, code.join("\n"));
        }
    }
    out
}

/// The paths a module's code names: `crate::a::b` and `super::c` (as `parent::c`), each
/// resolved to the longest module name it starts with; braces of `use` lists expanded.
fn imports(me: &str, code: &str, names: &BTreeSet<String>) -> BTreeSet<String> {
    let mut paths = Vec::new();
    let bytes = code.as_bytes();
    for start in ["crate::", "super::"] {
        let mut from = 0;
        while let Some(at) = code[from..].find(start) {
            let at = from + at;
            from = at + start.len();
            if at > 0 && (bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_') {
                continue;
            }
            let mut end = at;
            while end < bytes.len()
                && (bytes[end].is_ascii_alphanumeric() || bytes[end] == b'_' || bytes[end] == b':')
            {
                end += 1;
            }
            let prefix = &code[at..end];
            if end < bytes.len() && bytes[end] == b'{' {
                let close = code[end..].find('}').map_or(bytes.len(), |c| end + c);
                for item in code[end + 1..close].split(',') {
                    let item = item.split_whitespace().next().unwrap_or("");
                    if item == "self" || item.is_empty() {
                        paths.push(prefix.trim_end_matches(':').to_string());
                    } else {
                        paths.push(format!("{prefix}{item}"));
                    }
                }
            } else {
                paths.push(prefix.to_string());
            }
        }
    }
    let parent: Vec<&str> = me.split("::").collect();
    let mut out = BTreeSet::new();
    for path in paths {
        let mut parts: Vec<&str> = path.split("::").filter(|p| !p.is_empty()).collect();
        match parts.first() {
            Some(&"crate") => {
                parts.remove(0);
            }
            Some(&"super") => {
                parts.remove(0);
                let mut full = parent[..parent.len() - 1].to_vec();
                full.extend(parts);
                parts = full;
            }
            _ => continue,
        }
        let target = (1..=parts.len())
            .rev()
            .map(|n| parts[..n].join("::"))
            .find(|c| names.contains(c));
        if let Some(t) = target {
            let related =
                t == me || t.starts_with(&format!("{me}::")) || me.starts_with(&format!("{t}::"));
            if !related {
                out.insert(t);
            }
        }
    }
    out
}

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let mods = modules();
    let names: BTreeSet<String> = mods.keys().cloned().collect();
    mods.iter()
        .map(|(m, code)| (m.clone(), imports(m, code, &names)))
        .collect()
}

/// A cycle through `from` (a path back to it), if any.
fn cycle_from(graph: &BTreeMap<String, BTreeSet<String>>, from: &str) -> Option<Vec<String>> {
    let mut stack = vec![(from.to_string(), vec![from.to_string()])];
    let mut seen = BTreeSet::new();
    while let Some((at, path)) = stack.pop() {
        for next in &graph[&at] {
            if next == from {
                let mut cycle = path.clone();
                cycle.push(from.to_string());
                return Some(cycle);
            }
            if seen.insert(next.clone()) {
                let mut p = path.clone();
                p.push(next.clone());
                stack.push((next.clone(), p));
            }
        }
    }
    None
}

#[test]
fn no_modules_import_each_other() {
    let g = graph();
    assert!(g.len() > 40, "the source was read: {} modules", g.len());
    assert!(
        g["cmd::pack"].contains("packer") && g["raw::row_x86"].contains("raw::row_types"),
        "imports are found: {:?} {:?}",
        g["cmd::pack"],
        g["raw::row_x86"]
    );
    let cycles: Vec<String> = g
        .keys()
        .filter_map(|m| cycle_from(&g, m))
        .map(|c| c.join(" → "))
        .collect();
    assert!(cycles.is_empty(), "import cycles:\n{}", cycles.join("\n"));
}

#[test]
fn the_contract_and_the_names_depend_on_nothing_above_them() {
    let g = graph();
    for (m, deps) in &g {
        if m.starts_with("format") {
            let outside: Vec<&String> = deps
                .iter()
                // `crc` is the CRC-32C the format names for its checksums, a leaf like `rng`.
                .filter(|d| {
                    !d.starts_with("format") && !["rng", "error", "crc"].contains(&d.as_str())
                })
                .collect();
            assert!(outside.is_empty(), "{m} imports {outside:?}");
        }
    }
    let names: Vec<&String> = g["pack::files"]
        .iter()
        .filter(|d| !d.starts_with("format") && *d != "error")
        .collect();
    assert!(names.is_empty(), "pack::files imports {names:?}");
}

/// `cmd → pack → format`, `raw → format`: the pack library (reader, writers, verify, stats)
/// never reaches up into a command, the raw input side or the export and report formats.
/// `pack::doc_support` is the exception: the doc tests' fixture pack is made by `pack`.
#[test]
fn the_pack_library_depends_on_nothing_above_it() {
    let g = graph();
    let above = ["cmd", "cli", "raw", "export", "report", "packer"];
    for (m, deps) in g
        .iter()
        .filter(|(m, _)| m.starts_with("pack::") || *m == "pack")
        .filter(|(m, _)| *m != "pack::doc_support")
    {
        let up: Vec<&String> = deps
            .iter()
            .filter(|d| {
                above
                    .iter()
                    .any(|a| *d == a || d.starts_with(&format!("{a}::")))
            })
            .collect();
        assert!(up.is_empty(), "{m} imports {up:?}");
    }
}

/// Modules of the command line: the only ones that may import `cmd` or `cli`, and use anyhow.
fn is_cli(m: &str) -> bool {
    m == "cli" || m == "cmd" || m.starts_with("cmd::")
}

/// Only the command line imports the command line: the library (pack, the operations, the
/// doc fixture) never reaches up into `cmd` or `cli`.
#[test]
fn nothing_outside_the_command_line_imports_it() {
    let g = graph();
    for (m, deps) in g.iter().filter(|(m, _)| !is_cli(m)) {
        let up: Vec<&String> = deps.iter().filter(|d| is_cli(d)).collect();
        assert!(up.is_empty(), "{m} imports {up:?}");
    }
}

/// The library's errors are its own typed `Error`: anyhow is the command line's.
#[test]
fn the_library_does_not_use_anyhow() {
    for (m, code) in modules().iter().filter(|(m, _)| !is_cli(m)) {
        let code: String = code
            .lines()
            .filter(|l| !l.trim_start().starts_with('#'))
            .collect::<Vec<_>>()
            .join("\n");
        for word in ["anyhow", "UsageError"] {
            assert!(!code.contains(word), "{m} uses {word}");
        }
    }
}

/// The primitives that open a pack's files: shard listings, npy headers, `metadata.db`.
const DOOR_PRIMITIVES: [&str; 8] = [
    "list_shards(",
    "open_shards(",
    "open_metadata(",
    "open_read_only(",
    "read_head(",
    "parse_header(",
    "parse_array_header(",
    "Connection::open",
];

/// Where `primitive` is called outside the pack module (the one door: `pack::open` and the
/// pack's own files) and the format contract that defines the primitives.
fn doors(mods: &BTreeMap<String, String>) -> Vec<String> {
    let inside = |m: &str| m == "pack" || m.starts_with("pack::") || m.starts_with("format");
    let mut found = Vec::new();
    for (m, code) in mods.iter().filter(|(m, _)| !inside(m)) {
        for p in DOOR_PRIMITIVES {
            if code.contains(p) {
                found.push(format!("{m} calls {p}"));
            }
        }
    }
    found
}

/// One door into a pack: no command and no operation opens shard files, parses npy headers
/// or opens `metadata.db` itself; they all read through the pack module's opener.
#[test]
fn every_reader_goes_through_the_one_door() {
    let found = doors(&modules());
    assert!(
        found.is_empty(),
        "other doors into a pack:\n{}",
        found.join("\n")
    );
    // The checker itself finds a door.
    let mut fake = BTreeMap::new();
    fake.insert(
        "merge::source".to_string(),
        "let c = metadata::open_read_only(&p)?;".to_string(),
    );
    assert_eq!(doors(&fake), ["merge::source calls open_read_only("]);
}

#[test]
fn a_cycle_is_found_when_there_is_one() {
    // The checker itself: a module graph with a cycle through three modules.
    let mut g = BTreeMap::new();
    let names: BTreeSet<String> = ["a", "b", "c"].iter().map(|s| s.to_string()).collect();
    g.insert("a".to_string(), imports("a", "use crate::b::X;", &names));
    g.insert(
        "b".to_string(),
        imports("b", "use crate::{c, self};", &names),
    );
    g.insert(
        "c".to_string(),
        imports("c", "fn f() { crate::a::g() }", &names),
    );
    assert_eq!(
        cycle_from(&g, "a").map(|c| c.join(" → ")),
        Some("a → b → c → a".into())
    );
}
