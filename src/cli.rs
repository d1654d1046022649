//! What the commands share in reading their command line: row counts with units (`--shard-rows
//! 1M`), memory sizes (`--memory 512MiB`), run selection by SQL (`--where`, `--param`), and the
//! command line itself as a pack's `session` records it.

use std::time::Duration;

use anyhow::Result;
use clap::Args;

use crate::pack::query::{Param, RunFilter, SqlLimits};

/// `--version N|NAME`: which version of a pack a reading command reads.
#[derive(Args, Debug, Clone, Default)]
pub struct VersionArg {
    /// Read the pack as version N (or the version tag NAME names) was: its rows, runs and
    /// companion families only. `dataset-packer versions PACK` lists them [default: latest].
    #[arg(long = "version", value_name = "N|NAME", default_value = "latest")]
    pub version: crate::pack::versions::VersionSpec,
}

/// `--where SQL` and its `--param` values, as `export` and `stats` take them.
#[derive(Args, Debug, Clone, Default)]
pub struct WhereArgs {
    /// Select runs with SQL: a WHERE expression over the columns of runs and run_details
    /// ("depth = 7 AND max_score > 600000"), or a query that returns run ids ("SELECT id FROM
    /// runs WHERE max_score BETWEEN ? AND ?"). It may start with a comment (-- … or /* … */).
    #[arg(long = "where", value_name = "SQL", allow_hyphen_values = true)]
    pub sql: Option<String>,
    /// A value for a parameter of --where (repeatable): VALUE binds the next `?`, NAME=VALUE
    /// binds `:NAME`. Integers and reals are numbers, 'quoted' values always text, NULL is null.
    #[arg(long = "param", value_name = "[NAME=]VALUE", value_parser = Param::parse,
          requires = "sql", allow_hyphen_values = true)]
    pub params: Vec<Param>,
    #[command(flatten)]
    pub limits: SqlLimitArgs,
}

/// `--sql-timeout` and `--sql-memory`: how long a run selection may run and how much memory
/// SQLite may take for it (`--where`, and the viewer's filters).
#[derive(Args, Debug, Clone, Default)]
pub struct SqlLimitArgs {
    /// Stop a --where selection after this many seconds (a WITH RECURSIVE query that never
    /// ends) and say so.
    #[arg(long = "sql-timeout", value_name = "SECONDS", value_parser = parse_seconds,
          default_value = "300")]
    pub sql_timeout: Duration,
    /// Stop a --where selection once SQLite needs this much more memory for it (512MiB,
    /// 2GiB) and say so.
    #[arg(long = "sql-memory", value_name = "SIZE", value_parser = parse_size,
          default_value = "1GiB")]
    pub sql_memory: u64,
}

impl SqlLimitArgs {
    /// The limits as the library takes them.
    pub fn limits(&self) -> SqlLimits {
        SqlLimits {
            time: self.sql_timeout,
            memory: self.sql_memory,
        }
    }
}

impl WhereArgs {
    /// The selection as the library takes it; None without `--where`.
    pub fn filter(&self) -> Option<RunFilter> {
        self.sql.as_ref().map(|sql| RunFilter {
            sql: sql.clone(),
            params: self.params.clone(),
            limits: self.limits.limits(),
        })
    }
}

/// `300`, `2.5` → a duration in seconds (more than 0).
pub fn parse_seconds(text: &str) -> Result<Duration, String> {
    text.trim()
        .parse::<f64>()
        .ok()
        .filter(|s| *s > 0.0)
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .ok_or_else(|| format!("{text:?} is not a number of seconds like 300 or 2.5"))
}

/// `250000`, `250k`, `1M`, `1.5M`, `10M`, `2G` → rows (decimal units: k = 10^3, M = 10^6,
/// G = 10^9); at least 1.
pub fn parse_rows(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let scale: u64 = match unit.trim() {
        "" => 1,
        "k" | "K" => 1_000,
        "M" | "m" => 1_000_000,
        "G" | "g" => 1_000_000_000,
        _ => {
            return Err(format!(
                "{text:?} is not a row count like 250000, 250k, 1M or 10M"
            ));
        }
    };
    let rows = if num.contains('.') {
        let value: f64 = num
            .parse()
            .map_err(|_| format!("{text:?} is not a row count like 250000, 250k, 1M or 10M"))?;
        let rows = value * scale as f64;
        if rows.fract() != 0.0 {
            return Err(format!("{text:?} is not a whole number of rows"));
        }
        rows as u64
    } else {
        num.parse::<u64>()
            .ok()
            .and_then(|n| n.checked_mul(scale))
            .ok_or_else(|| format!("{text:?} is not a row count like 250000, 250k, 1M or 10M"))?
    };
    if rows == 0 {
        return Err("a row count must be at least 1".into());
    }
    Ok(rows)
}

/// `512MiB`, `4GiB`, `64M`, `1000000` → bytes (as [`crate::store::parse_size`] reads sizes);
/// at least 4 KiB.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let bytes = crate::store::parse_size(text).map_err(|e| e.to_string())?;
    if bytes < 4096 {
        return Err(format!("{text:?} is too little memory (at least 4KiB)"));
    }
    Ok(bytes)
}

/// The command line this process was started with, each argument quoted for a POSIX shell
/// where it needs it, so it can be pasted back (what the library records by default).
pub fn command_line() -> String {
    crate::pack::query::process_command_line()
}

/// An error in how the tool was called (exit code 2), as opposed to bad data (exit code 1):
/// what the command line itself refuses before calling the library.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// The exit code for a failed command: 2 for a usage error (the command line or a state the
/// library refuses to act on: `ErrorKind::Refused`, or a change another writer's commit made
/// moot: `ErrorKind::Conflict`), 1 for everything else (bad data, I/O).
pub fn exit_code(e: &anyhow::Error) -> u8 {
    let refused = e.chain().any(|c| {
        c.is::<UsageError>()
            || c.downcast_ref::<crate::Error>().is_some_and(|e| {
                matches!(
                    e.kind(),
                    crate::ErrorKind::Refused | crate::ErrorKind::Conflict
                )
            })
    });
    if refused { 2 } else { 1 }
}

/// The message for a failed command: the error and its causes, then, when the library says
/// which option the error is about, the flag that sets it.
pub fn render(e: &anyhow::Error) -> String {
    let mut text = format!(
        "error: {}",
        crate::error::join_chain(e.chain().map(|c| c.to_string()))
    );
    let option = e.chain().find_map(|c| {
        c.downcast_ref::<crate::Error>()
            .and_then(crate::Error::option)
    });
    if let Some(option) = option {
        let flag = match option {
            "selection" => "--where".to_string(),
            "params" => "--param".to_string(),
            other => format!("--{}", other.replace('_', "-")),
        };
        if !text.contains(&flag) {
            text.push_str(&format!("\n  (see {flag})"));
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pack::query::shell_quote;

    #[test]
    fn row_counts_with_units() {
        assert_eq!(parse_rows("250000"), Ok(250_000));
        assert_eq!(parse_rows("250k"), Ok(250_000));
        assert_eq!(parse_rows("1M"), Ok(1_000_000));
        assert_eq!(parse_rows("1.5M"), Ok(1_500_000));
        assert_eq!(parse_rows("10M"), Ok(10_000_000));
        assert_eq!(parse_rows("2G"), Ok(2_000_000_000));
        assert!(parse_rows("0").is_err());
        assert!(parse_rows("1.5").is_err());
        assert!(parse_rows("1MiB").is_err());
        assert!(parse_rows("99999999999999999999").is_err());
    }

    #[test]
    fn quotes_what_a_shell_would_split() {
        assert_eq!(shell_quote("--where"), "--where");
        assert_eq!(shell_quote("depth = 7"), "'depth = 7'");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
        assert_eq!(shell_quote(""), "''");
    }
}
