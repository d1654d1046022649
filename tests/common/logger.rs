//! Facts of the current logger's row layout that several tests write rows with.
#![allow(dead_code)]

/// The `search` object's members after `used`, in log order: 12 counters, the hit rate (a
/// percentage with six decimals), then `max_move_depth`.
pub const SEARCH_KEYS: [&str; 14] = [
    "total_nodes",
    "move_nodes",
    "tile_nodes",
    "tile_branches",
    "eval_calls",
    "prune_score",
    "prune_depth",
    "prune_prob",
    "cache_lookups",
    "cache_hits",
    "cache_updates",
    "cache_collisions",
    "cache_hit_rate",
    "max_move_depth",
];

/// `,"search":{…}` as the current logger ends a row the search did not value (a tuple row):
/// `used` false and 14 nulls.
pub fn unsearched() -> String {
    let nulls: Vec<String> = SEARCH_KEYS
        .iter()
        .map(|k| format!("\"{k}\":null"))
        .collect();
    format!(",\"search\":{{\"used\":false,{}}}", nulls.join(","))
}
