//! Error messages name the file, and the line or row where there is one: here the cases a new
//! user met (a byte-order mark at the start of a rows file or sidecar).

mod common;

use common::*;

fn drop_with_run(
    t: &std::path::Path,
    rows: &[u8],
    sidecar: &[u8],
    gz_sidecar: bool,
) -> std::path::PathBuf {
    let d = t.join("drop");
    std::fs::create_dir_all(&d).unwrap();
    write_gz(&d.join("g.jsonl.gz"), rows);
    if gz_sidecar {
        write_gz(&d.join("g.meta.json.gz"), sidecar);
    } else {
        std::fs::write(d.join("g.meta.json"), sidecar).unwrap();
    }
    d
}

/// A row as the current logger writes it (raw-format.md's example).
const ROW: &[u8] = br#"{"seed":1000,"step_index":2999,"max_rank":12,"move":"up","valuation_type":"search","valuation":244.033997,"board":[12,11,1,5,6,5,8,2,3,4,2,1,0,1,2,1],"branch_evs":{"up":244.034000,"left":206.432000,"right":null,"down":-690.786000},"search":{"used":true,"total_nodes":396,"move_nodes":89,"tile_nodes":307,"tile_branches":88,"eval_calls":307,"prune_score":52,"prune_depth":277,"prune_prob":182,"cache_lookups":25,"cache_hits":6,"cache_updates":19,"cache_collisions":3,"cache_hit_rate":24.000000,"max_move_depth":2}}"#;
const SIDECAR: &[u8] = br#"{"seed":1,"num_moves":1,"score":0,"max_tile":2}"#;

/// (case, rows file text, sidecar text, sidecar gzipped, where the message points)
type Case = (&'static str, Vec<u8>, Vec<u8>, bool, &'static str);

#[test]
fn a_byte_order_mark_is_named_as_such() {
    let bom = b"\xEF\xBB\xBF";
    let cases: Vec<Case> = vec![
        (
            "rows",
            [bom.as_slice(), ROW, b"\n"].concat(),
            SIDECAR.to_vec(),
            false,
            "g.jsonl.gz:1:",
        ),
        (
            "sidecar",
            [ROW, b"\n"].concat(),
            [bom.as_slice(), SIDECAR].concat(),
            false,
            "g.meta.json:",
        ),
        (
            "gzipped sidecar",
            [ROW, b"\n"].concat(),
            [bom.as_slice(), SIDECAR].concat(),
            true,
            "g.meta.json.gz:",
        ),
    ];
    for (case, rows, sidecar, gz, place) in cases {
        let t = tempfile::tempdir().unwrap();
        let d = drop_with_run(t.path(), &rows, &sidecar, gz);
        let out = run(&["pack", "--input", s(&d), "--output", s(&t.path().join("p"))]);
        assert_eq!(out.status.code(), Some(1), "{case}");
        let err = stderr(&out);
        assert!(
            err.contains(place) && err.contains("UTF-8 byte-order mark (bytes EF BB BF)"),
            "{case}: {err}"
        );
        assert!(
            !t.path().join("p").exists(),
            "{case}: nothing is left behind"
        );
    }
}
