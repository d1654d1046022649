//! The run sidecar (`BASE.meta.json` or `BASE.meta.json.gz`): one JSON object per game with the
//! run-level facts. `seed`, `num_moves`, `score` and `max_tile` are required; the rest is kept
//! when present; unknown fields are ignored.

use serde_json::{Map, Value};

/// A parsed sidecar.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Sidecar {
    pub seed: u32,
    pub num_moves: i64,
    pub score: i64,
    pub max_tile: i64,
    pub depth: Option<i64>,
    pub game_index: Option<i64>,
    pub max_rank: Option<i64>,
    pub sum_tile: Option<i64>,
    pub seconds: Option<f64>,
}

fn field<'a>(obj: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    obj.get(name).filter(|v| !v.is_null())
}

fn non_negative_int(obj: &Map<String, Value>, name: &str) -> Result<Option<i64>, String> {
    match field(obj, name) {
        None => Ok(None),
        Some(v) => match v.as_u64() {
            Some(n) if n <= i64::MAX as u64 => Ok(Some(n as i64)),
            _ => Err(format!(
                "sidecar field \"{name}\" must be a non-negative integer, found {v}"
            )),
        },
    }
}

fn required_int(obj: &Map<String, Value>, name: &str) -> Result<i64, String> {
    non_negative_int(obj, name)?
        .ok_or_else(|| format!("sidecar is missing the required field \"{name}\""))
}

/// Parses a sidecar's bytes; the error says what was wrong (the caller adds the path).
pub fn parse_sidecar(bytes: &[u8]) -> Result<Sidecar, String> {
    let value: Value =
        serde_json::from_slice(bytes).map_err(|e| format!("sidecar is not valid JSON: {e}"))?;
    let obj = value.as_object().ok_or("sidecar is not a JSON object")?;
    let seed = required_int(obj, "seed")?;
    let seed = u32::try_from(seed).map_err(|_| format!("sidecar seed {seed} does not fit u32"))?;
    let seconds = match field(obj, "seconds") {
        None => None,
        Some(v) => Some(
            v.as_f64()
                .filter(|s| s.is_finite())
                .ok_or_else(|| format!("sidecar field \"seconds\" must be a number, found {v}"))?,
        ),
    };
    Ok(Sidecar {
        seed,
        num_moves: required_int(obj, "num_moves")?,
        score: required_int(obj, "score")?,
        max_tile: required_int(obj, "max_tile")?,
        depth: non_negative_int(obj, "depth")?,
        game_index: non_negative_int(obj, "game_index")?,
        max_rank: non_negative_int(obj, "max_rank")?,
        sum_tile: non_negative_int(obj, "sum_tile")?,
        seconds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_real_sidecar() {
        let s = parse_sidecar(br#"{"seed":272350805,"depth":6,"game_index":0,"steps_file":"x.jsonl.gz","num_moves":27885,"score":795564,"max_tile":32768,"max_rank":15,"sum_tile":61434,"seconds":50.247026}"#).unwrap();
        assert_eq!(s.seed, 272350805);
        assert_eq!(s.num_moves, 27885);
        assert_eq!(s.depth, Some(6));
        assert_eq!(s.seconds, Some(50.247026));
    }

    #[test]
    fn refuses_missing_and_wrong_fields() {
        assert!(parse_sidecar(b"{").unwrap_err().contains("JSON"));
        assert!(
            parse_sidecar(br#"{"seed":1,"num_moves":1,"max_tile":2}"#)
                .unwrap_err()
                .contains("score")
        );
        assert!(
            parse_sidecar(br#"{"seed":4294967296,"num_moves":1,"score":0,"max_tile":2}"#)
                .unwrap_err()
                .contains("seed")
        );
        assert!(
            parse_sidecar(br#"{"seed":1,"num_moves":-1,"score":0,"max_tile":2}"#)
                .unwrap_err()
                .contains("num_moves")
        );
    }
}
