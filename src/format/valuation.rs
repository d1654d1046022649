//! The valuation-type table: id ↔ name for the `valuation_type` column, and
//! `valuation_types.json` in the form writers produce (an array) and the three forms readers accept.

use std::collections::HashMap;

use crate::error::{Context, Result, fail};

/// Names with fixed ids in every pack: search=0, tuple11=1, tuple10=2.
pub const STANDARD_NAMES: [&str; 3] = ["search", "tuple11", "tuple10"];
/// Ids are one byte.
pub const MAX_NAMES: usize = 256;
pub const FILE_NAME: &str = "valuation_types.json";

/// The id ↔ name table of one pack. Ids 0..=2 are always the standard names; further names
/// get the next id on first appearance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValuationTable {
    names: Vec<String>,
    ids: HashMap<String, u8>,
}

impl Default for ValuationTable {
    fn default() -> Self {
        Self::new()
    }
}

impl ValuationTable {
    pub fn new() -> ValuationTable {
        let mut t = ValuationTable {
            names: Vec::new(),
            ids: HashMap::new(),
        };
        for n in STANDARD_NAMES {
            t.push(n.to_string());
        }
        t
    }

    fn push(&mut self, name: String) -> u8 {
        let id = self.names.len() as u8;
        self.ids.insert(name.clone(), id);
        self.names.push(name);
        id
    }

    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The table as it was when it had `len` names (never fewer than the standard ones):
    /// names are only ever appended, so an earlier version of a pack had a prefix of its
    /// table now.
    ///
    /// ```
    /// use dataset_packer::format::valuation::{STANDARD_NAMES, ValuationTable};
    /// let table = ValuationTable::from_json(r#"["search", "tuple11", "tuple10", "probe"]"#)?;
    /// assert_eq!(table.prefix(4).len(), 4);
    /// assert_eq!(table.prefix(0).names(), STANDARD_NAMES);
    /// # Ok::<(), dataset_packer::Error>(())
    /// ```
    pub fn prefix(&self, len: usize) -> ValuationTable {
        let mut out = ValuationTable::new();
        for name in self.names.iter().take(len).skip(out.len()) {
            out.push(name.clone());
        }
        out
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    pub fn id(&self, name: &str) -> Option<u8> {
        self.ids.get(name).copied()
    }

    pub fn name(&self, id: u8) -> Option<&str> {
        self.names.get(id as usize).map(String::as_str)
    }

    /// How many of `names` are not in the table yet (duplicates counted once).
    pub fn count_new<'a>(&self, names: impl IntoIterator<Item = &'a str>) -> usize {
        let mut seen: Vec<&str> = Vec::new();
        for n in names {
            if self.id(n).is_none() && !seen.contains(&n) {
                seen.push(n);
            }
        }
        seen.len()
    }

    /// The id of `name`, adding it at the end when new. Fails when the table is full.
    pub fn intern(&mut self, name: &str) -> Result<u8> {
        if let Some(id) = self.id(name) {
            return Ok(id);
        }
        if self.names.len() >= MAX_NAMES {
            fail!(
                InvalidInput,
                "a 257th valuation_type name {name:?} (at most {MAX_NAMES} names fit the one-byte id)"
            );
        }
        Ok(self.push(name.to_string()))
    }

    /// `valuation_types.json` as written: a JSON array, index = id.
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string(&self.names).expect("strings serialise");
        s.push('\n');
        s
    }

    /// Reads any of the three accepted forms: `["search", …]`, `{"0": "search", …}` (id → name)
    /// or `{"search": 0, …}` (name → id). Names must be unique, ids contiguous from 0, ≤ 256.
    /// The result keeps the file's ids (it does not force the standard names into 0..=2).
    pub fn from_json(text: &str) -> Result<ValuationTable> {
        let value: serde_json::Value = serde_json::from_str(text).context("not valid JSON")?;
        let pairs: Vec<(u64, String)> = match value {
            serde_json::Value::Array(items) => items
                .into_iter()
                .enumerate()
                .map(|(i, v)| match v {
                    serde_json::Value::String(s) => Ok((i as u64, s)),
                    other => fail!(Corrupt, "entry {i} is {other}, not a name"),
                })
                .collect::<Result<_>>()?,
            serde_json::Value::Object(map) => {
                let id_to_name = map.values().all(|v| v.is_string());
                let name_to_id = map.values().all(|v| v.is_u64());
                map.into_iter()
                    .map(|(k, v)| match (v, id_to_name, name_to_id) {
                        (serde_json::Value::String(name), true, _) => {
                            let id = k
                                .parse::<u64>()
                                .with_context(|| format!("key {k:?} is not an id"))?;
                            Ok((id, name))
                        }
                        (serde_json::Value::Number(id), _, true) => {
                            Ok((id.as_u64().unwrap_or(u64::MAX), k))
                        }
                        _ => fail!(Corrupt, "an object must map ids to names or names to ids"),
                    })
                    .collect::<Result<_>>()?
            }
            _ => fail!(Corrupt, "expected an array of names or an object"),
        };
        let mut slots: Vec<Option<String>> = vec![None; pairs.len()];
        for (id, name) in pairs {
            let slot = slots
                .get_mut(id as usize)
                .with_context(|| format!("ids are not contiguous from 0 (found id {id})"))?;
            if slot.is_some() {
                fail!(Corrupt, "id {id} appears twice");
            }
            *slot = Some(name);
        }
        if slots.len() > MAX_NAMES {
            fail!(
                Corrupt,
                "{} names; at most {MAX_NAMES} fit the one-byte id",
                slots.len()
            );
        }
        let mut t = ValuationTable {
            names: Vec::new(),
            ids: HashMap::new(),
        };
        for name in slots.into_iter().flatten() {
            if t.ids.contains_key(&name) {
                fail!(Corrupt, "name {name:?} appears twice");
            }
            t.push(name);
        }
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standard_ids_then_first_appearance() {
        let mut t = ValuationTable::new();
        assert_eq!(t.intern("tuple10").unwrap(), 2);
        assert_eq!(t.intern("tuple12").unwrap(), 3);
        assert_eq!(t.intern("search").unwrap(), 0);
        assert_eq!(
            t.to_json(),
            "[\"search\",\"tuple11\",\"tuple10\",\"tuple12\"]\n"
        );
    }

    #[test]
    fn refuses_a_257th_name() {
        let mut t = ValuationTable::new();
        for i in 3..256 {
            t.intern(&format!("v{i}")).unwrap();
        }
        assert_eq!(t.len(), 256);
        assert!(t.intern("one-too-many").is_err());
    }

    #[test]
    fn reads_all_three_forms() {
        let want = ValuationTable::from_json(r#"["search","tuple11","tuple10","x"]"#).unwrap();
        let by_id =
            ValuationTable::from_json(r#"{"0":"search","1":"tuple11","2":"tuple10","3":"x"}"#)
                .unwrap();
        let by_name =
            ValuationTable::from_json(r#"{"search":0,"tuple11":1,"x":3,"tuple10":2}"#).unwrap();
        assert_eq!(by_id, want);
        assert_eq!(by_name, want);
        assert!(ValuationTable::from_json(r#"["a","a"]"#).is_err());
        assert!(ValuationTable::from_json(r#"{"a":0,"b":2}"#).is_err());
    }
}
