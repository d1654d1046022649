"""Run selection with SQL, by the same rules as `dataset-packer export --where`.

The SQL text is one of two forms, told apart by its first word (after comments, and inside a
pair of parentheses around the whole text):

- a WHERE expression over the columns of `runs` left-joined with `run_details` (when the pack
  has that table): `SELECT runs.id FROM runs LEFT JOIN run_details ON run_details.run_id =
  runs.id WHERE (\\n EXPR \\n) ORDER BY runs.id`;
- a query (`SELECT …`, `WITH …`, `VALUES …`) that returns run ids, run exactly as sqlite3 runs
  it. As an expression it would be a scalar subquery that selects every run or none, so it is
  never read as one.

A query must return one column of integers that are run ids of the pack; anything else (NULL,
text, reals, unknown ids, several columns, a statement that is not a query) is refused.
`params` are bound as `sqlite3` binds them (a sequence for `?`, a mapping for `:name`), and
must match the SQL's parameters exactly: an unbound parameter would be NULL and silently
select nothing. The connection is read-only, so the SQL cannot change the pack. Errors say
what is wrong in the user's terms: an unknown column is named with the nearest known one and
the list of columns.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Mapping

import numpy as np

from ._errors import SelectionError

#: Statements that are not queries: named when refused.
NOT_QUERIES = frozenset(
    "ALTER ANALYZE ATTACH BEGIN COMMIT CREATE DELETE DETACH DROP END EXPLAIN INSERT PRAGMA "
    "REINDEX RELEASE REPLACE ROLLBACK SAVEPOINT UPDATE UPSERT VACUUM".split())

_PARAM = re.compile(r"\?(\d*)|[:@$]([A-Za-z_][A-Za-z0-9_]*)")


def has_table(conn: sqlite3.Connection, name: str) -> bool:
    row = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                       (name,)).fetchone()
    return row is not None


def code(sql: str) -> str:
    """`sql` with its comments and the insides of its strings and quoted names blanked out
    (same length, quote characters kept), so that only SQL proper is looked at."""
    out = list(sql)
    i, n = 0, len(sql)
    while i < n:
        if sql.startswith("--", i):
            end = sql.find("\n", i)
            end = n if end < 0 else end
            out[i:end] = " " * (end - i)
            i = end
        elif sql.startswith("/*", i):
            end = sql.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out[i:end] = " " * (end - i)
            i = end
        elif sql[i] in "'\"`[":
            # A doubled quote inside is an escaped quote: leaving and re-entering the quoted
            # span at once gives the same result.
            close = sql.find("]" if sql[i] == "[" else sql[i], i + 1)
            end = n if close < 0 else close
            out[i + 1:end] = " " * (end - i - 1)
            i = end + 1
        else:
            i += 1
    return "".join(out)


def significant(sql: str) -> list[tuple[int, str]]:
    """Each character of SQL proper (not space, comment or quoted text) with its offset."""
    return [(i, c) for i, c in enumerate(code(sql)) if not c.isspace()]


def whole_group(sql: str) -> str | None:
    """The text inside the parentheses when the whole of `sql` is one parenthesised group."""
    tokens = significant(sql)
    if len(tokens) < 2 or tokens[0][1] != "(" or tokens[-1][1] != ")":
        return None
    depth = 0
    for k, (_, c) in enumerate(tokens):
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth < 0 or (depth == 0 and k != len(tokens) - 1):
                return None
    return sql[tokens[0][0] + 1:tokens[-1][0]] if depth == 0 else None


def first_word(sql: str) -> str:
    tokens = significant(sql)
    if not tokens:
        return ""
    return re.match(r"[A-Za-z0-9_]*", sql[tokens[0][0]:]).group(0)


def query_text(sql: str, what: str) -> str | None:
    """The query to run as written (without parentheses around the whole), or None when `sql`
    is a WHERE expression. A statement that is not a query raises SelectionError."""
    inner = sql
    while (group := whole_group(inner)) is not None:
        inner = group
    word = first_word(inner).upper()
    if word in ("SELECT", "WITH", "VALUES"):
        return inner
    if word in NOT_QUERIES and first_word(sql).upper() == word:
        article = "an" if word[0] in "AEIU" else "a"
        raise SelectionError(
            f"{what} {sql!r}: this is {article} {word} statement; runs are selected by a WHERE "
            f"expression (e.g. \"depth = 7\") or by a SELECT/WITH query that returns run ids, "
            f"nothing else")
    return None


def parameters(sql: str) -> tuple[int, list[str]]:
    """How many positional values `sql` takes (as SQLite numbers `?` and `?NNN`) and the names
    of its named parameters (`:name`, `@name`, `$name`), in order of appearance."""
    count, names = 0, []
    for m in _PARAM.finditer(code(sql)):
        if m.group(2) is not None:
            if m.group(2) not in names:
                names.append(m.group(2))
                count += 1
        elif m.group(1):
            count = max(count, int(m.group(1)))
        else:
            count += 1
    return count - len(names), names


def check_params(sql: str, params, what: str):
    """`params` checked against the SQL's parameters; returned as sqlite3 takes them."""
    positional, names = parameters(sql)
    if params is None:
        params = ()
    if isinstance(params, (str, bytes)):
        raise TypeError(f"{what}: params must be a sequence (for ?) or a mapping (for :name), "
                        f"not {type(params).__name__}")
    if isinstance(params, Mapping):
        unknown = [k for k in params if k not in names]
        if unknown:
            have = ", ".join(f":{n}" for n in names) or "no named parameters"
            raise SelectionError(f"{what} {sql!r}: params has {unknown[0]!r}, but the SQL has "
                                 f"no parameter :{unknown[0]} (it has {have})")
        missing = [n for n in names if n not in params]
        if missing:
            raise SelectionError(f"{what} {sql!r}: :{missing[0]} has no value in params")
        if positional:
            raise SelectionError(f"{what} {sql!r}: the SQL has positional parameters (?), "
                                 f"which take a sequence of values, not a mapping")
        return dict(params)
    values = list(params)
    if names:
        raise SelectionError(f"{what} {sql!r}: the SQL has named parameters "
                             f"({', '.join(':' + n for n in names)}); pass params as a dict")
    if len(values) != positional:
        raise SelectionError(
            f"{what} {sql!r}: the SQL has {positional} positional parameter"
            f"{'' if positional == 1 else 's'} (?) and {len(values)} value"
            f"{'' if len(values) == 1 else 's'} {'was' if len(values) == 1 else 'were'} given "
            f"in params")
    return values


def run_ids(conn: sqlite3.Connection, sql: str, params=None, what: str = "select") -> np.ndarray:
    """The run ids (ascending, each once, int64) that `sql` selects with `params` bound."""
    details = has_table(conn, "run_details")
    query = query_text(sql, what)
    bound = check_params(sql if query is None else query, params, what)
    if query is None:
        source = ("runs LEFT JOIN run_details ON run_details.run_id = runs.id" if details
                  else "runs")
        # The expression on lines of its own, so a trailing `-- comment` cannot swallow the rest.
        text = f"SELECT runs.id FROM {source} WHERE (\n{sql}\n) ORDER BY runs.id"
    else:
        text = query
    try:
        cursor = conn.execute(text, bound)
        if query is not None and len(cursor.description or ()) != 1:
            names = ", ".join(d[0] for d in cursor.description or ())
            raise SelectionError(
                f"{what} {sql!r}: the query returns {len(cursor.description or ())} columns "
                f"({names}); it must return one, the run ids, e.g. SELECT id FROM runs WHERE …")
        values = [v for (v,) in cursor]
    except (sqlite3.Error, sqlite3.Warning) as e:
        noun = "expression" if query is None else "query"
        raise SelectionError(explain(what, sql, noun, str(e), columns(conn, details))) from None
    if query is None:
        return np.array(values, dtype=np.int64)
    for k, v in enumerate(values):
        if type(v) is not int:
            shown = "NULL" if v is None else f"{v!r} ({type(v).__name__})"
            raise SelectionError(
                f"{what} {sql!r}: row {k + 1} of the query's result is {shown}, not a run id; "
                f"the query must return the run ids (an integer column such as runs.id)")
    ids = np.unique(np.array(values, dtype=np.int64))
    known = np.array([r for (r,) in conn.execute("SELECT id FROM runs ORDER BY id")],
                     dtype=np.int64)
    unknown = np.setdiff1d(ids, known)
    if unknown.size:
        span = f"ids {known[0]}..={known[-1]}" if known.size else "no runs"
        listed = ", ".join(map(str, unknown[:5].tolist())) + (", …" if unknown.size > 5 else "")
        raise SelectionError(
            f"{what} {sql!r}: the query returns {unknown.size} value"
            f"{'' if unknown.size == 1 else 's'} that {'is' if unknown.size == 1 else 'are'} "
            f"not a run id of the pack: {listed} (the pack has {known.size} runs, {span}); the "
            f"query must return run ids, such as runs.id")
    return ids


def columns(conn: sqlite3.Connection, details: bool) -> list[tuple[str, str]]:
    """The columns of `runs` and `run_details` (table, name), for hints."""
    out = [("runs", row[1]) for row in conn.execute("PRAGMA table_info(runs)")]
    if details:
        out += [("run_details", row[1]) for row in conn.execute("PRAGMA table_info(run_details)")
                if row[1] != "run_id"]
    return out


def explain(what: str, sql: str, noun: str, message: str,
            known: list[tuple[str, str]]) -> str:
    """An error message about `sql` naming the problem and the usable columns."""
    out = f"{what} {sql!r}: "
    names = [c for _, c in known]
    if message.startswith("no such column: "):
        name = message[len("no such column: "):]
        out += f"no column {name}"
        table = next((t for t, c in known if c.lower() == name.lower()), None)
        near = nearest(name, names)
        if table is not None:
            # A query that reads only `runs` and names a column of `run_details`.
            out += (f" in the tables the {noun} reads: {name} is a column of {table}, which "
                    f"it must name (e.g. FROM runs JOIN run_details ON run_details.run_id = "
                    f"runs.id)")
        elif near is not None:
            out += f"; did you mean {near}?"
    elif unbalanced(sql) is not None:
        out += unbalanced(sql)
    elif "incomplete input" in message:
        out += f"the {noun} is incomplete: it ends after {sql.rstrip()!r}"
    elif "one statement at a time" in message:
        out += "only one statement is allowed (found a second one after ';')"
    elif "readonly database" in message:
        out += ("this statement would change metadata.db; runs are selected by a query that "
                "only reads")
    else:
        out += message
    return out + ("\n(runs can be selected by a WHERE expression over these columns, or by a "
                  "SELECT query over runs, run_details and the other tables that returns run "
                  f"ids: {', '.join(names)})")


def unbalanced(expr: str) -> str | None:
    """Says which parenthesis does not pair up (outside quotes), or None."""
    opened: list[int] = []
    quote = None
    for col, ch in enumerate(expr):
        if quote is not None:
            if ch == quote:
                quote = None
        elif ch in "'\"`":
            quote = ch
        elif ch == "(":
            opened.append(col)
        elif ch == ")":
            if not opened:
                return f"the ')' at column {col + 1} closes nothing"
            opened.pop()
    if opened:
        return f"the '(' at column {opened[0] + 1} is never closed"
    return None


def nearest(name: str, known: list[str]) -> str | None:
    """The known column nearest to `name` by edit distance, when near enough to be a typo."""
    name = name.lower()
    best = None
    for column in known:
        d = edit_distance(name, column.lower())
        if d <= max(len(column) // 3, 1) and d < len(name) and (best is None or d < best[0]):
            best = (d, column)
    return None if best is None else best[1]


def edit_distance(a: str, b: str) -> int:
    """Levenshtein distance."""
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a):
        cur = [i + 1]
        for j, cb in enumerate(b):
            cur.append(min(prev[j] + (ca != cb), prev[j + 1] + 1, cur[j] + 1))
        prev = cur
    return prev[-1]
