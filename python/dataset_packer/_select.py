"""Run selection with SQL, exactly as `dataset-packer export --where` does it.

The expression is an SQL condition over the columns of `runs` left-joined with `run_details`
(when the pack has that table): `SELECT runs.id FROM runs LEFT JOIN run_details ON
run_details.run_id = runs.id WHERE (\\n EXPR \\n) ORDER BY runs.id`. The connection is
read-only, so an expression cannot change the pack. Errors say what is wrong in the user's
terms: an unknown column is named with the nearest known one and the list of columns.
"""

from __future__ import annotations

import sqlite3

import numpy as np

from ._errors import SelectionError


def has_table(conn: sqlite3.Connection, name: str) -> bool:
    row = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                       (name,)).fetchone()
    return row is not None


def where_run_ids(conn: sqlite3.Connection, expr: str) -> np.ndarray:
    """The run ids (ascending, int64) for which `expr` holds."""
    details = has_table(conn, "run_details")
    source = ("runs LEFT JOIN run_details ON run_details.run_id = runs.id" if details
              else "runs")
    # The expression on lines of its own, so a trailing `-- comment` cannot swallow the rest.
    sql = f"SELECT runs.id FROM {source} WHERE (\n{expr}\n) ORDER BY runs.id"
    try:
        ids = [rid for (rid,) in conn.execute(sql)]
    except (sqlite3.Error, sqlite3.Warning) as e:
        raise SelectionError(explain(expr, str(e), columns(conn, details))) from None
    return np.array(ids, dtype=np.int64)


def columns(conn: sqlite3.Connection, details: bool) -> list[str]:
    """The column names an expression can use."""
    names = []
    for table in ("runs", "run_details") if details else ("runs",):
        names += [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]
    return names


def explain(expr: str, message: str, known: list[str]) -> str:
    """An error message about `expr` naming the problem and the usable columns."""
    out = f"select {expr!r}: "
    if message.startswith("no such column: "):
        name = message[len("no such column: "):]
        out += f"no column {name}"
        near = nearest(name, known)
        if near is not None:
            out += f"; did you mean {near}?"
    elif unbalanced(expr) is not None:
        out += unbalanced(expr)
    elif "incomplete input" in message:
        out += f"the expression is incomplete: it ends after {expr.rstrip()!r}"
    elif "one statement at a time" in message:
        out += "only one expression is allowed (found ';')"
    else:
        out += message
    return out + f"\n(the expression can use these columns: {', '.join(known)})"


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
