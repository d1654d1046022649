"""Run selection with SQL, by the same rules as `dataset-packer export --where`.

The SQL text is one of two forms, told apart by its first word (after comments, and inside a
pair of parentheses around the whole text):

- a WHERE expression over the columns of `runs` left-joined with `run_details` (when the pack
  has that table): `SELECT runs.id FROM runs LEFT JOIN run_details ON run_details.run_id =
  runs.id WHERE (\\n EXPR \\n) ORDER BY runs.id`;
- a query (`SELECT …`, `WITH …`, `VALUES …`) that returns run ids, run exactly as sqlite3 runs
  it. As an expression it would be a scalar subquery that selects every run or none, so it is
  never read as one.

An expression stays one expression: its parentheses must pair up among themselves (read as
SQLite's tokenizer reads them), so it cannot close the `WHERE (` around it and go on with
`UNION SELECT …`. Whatever the text, every id a selection returns must be a run id of the
pack; anything else (NULL, text, reals, unknown ids, several columns, a statement that is not
a query) is refused. `params` are bound as `sqlite3` binds them (a sequence for `?`, a
mapping for `:name`; names as SQLite reads them: `$a::b` is one parameter, `a::b`), and must
match the SQL's parameters exactly: an unbound parameter would be NULL and silently select
nothing. A value sqlite3 cannot bind exactly (an int beyond 64 bits, NaN, an object) is
refused.

A selection runs under limits, checked by SQLite's progress handler: `sql_timeout` seconds
(default 300) and `sql_memory` bytes of SQLite memory beyond what it held when the selection
began (default 1 GiB). Ctrl-C stops it too, with KeyboardInterrupt. The connection is
read-only, so the SQL cannot change the pack. Errors say what is wrong in the user's terms: an
unknown column is named with the nearest known one and the list of columns.
"""

from __future__ import annotations

import ctypes
import math
import re
import signal
import sqlite3
import threading
import time
from collections.abc import Mapping

import numpy as np

from ._errors import SelectionError

#: Statements that are not queries: named when refused.
NOT_QUERIES = frozenset(
    "ALTER ANALYZE ATTACH BEGIN COMMIT CREATE DELETE DETACH DROP END EXPLAIN INSERT PRAGMA "
    "REINDEX RELEASE REPLACE ROLLBACK SAVEPOINT UPDATE UPSERT VACUUM".split())

#: The limits `--sql-timeout` and `--sql-memory` default to.
DEFAULT_SQL_TIMEOUT = 300.0
DEFAULT_SQL_MEMORY = 1 << 30
#: VM instructions between two checks of the limits.
CHECK_EVERY_OPS = 10_000
#: Distinct unknown ids kept for the message before reading stops.
UNKNOWN_KEPT = 1000
_SPACE = " \t\n\f\r"


def has_table(conn: sqlite3.Connection, name: str) -> bool:
    row = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                       (name,)).fetchone()
    return row is not None


def _id_char(c: str) -> bool:
    """SQLite's identifier characters: ASCII letters and digits, `_`, `$`, and any non-ASCII
    character (a no-break space included)."""
    return c.isascii() and (c.isalnum() or c in "_$") or not c.isascii()


def variable_len(sql: str, i: int) -> tuple[int, bool]:
    """Where the name of a `:`/`@`/`$`/`#` parameter starting at `i` (after its prefix) ends,
    as SQLite's tokenizer measures it (identifier characters, `::` between parts, a `(…)`
    suffix up to `)` or whitespace), and whether it is a name at all."""
    n, end = 0, len(sql)
    while i < end:
        c = sql[i]
        if _id_char(c):
            n += 1
            i += 1
        elif c == "(" and n > 0:
            i += 1
            while i < end and sql[i] not in _SPACE and sql[i] != ")":
                i += 1
            closed = i < end and sql[i] == ")"
            return i + closed, closed
        elif c == ":" and sql.startswith("::", i):
            i += 2
        else:
            break
    return i, n > 0


def tokens(sql: str) -> list[tuple[int, int]]:
    """The tokens of `sql` as SQLite's tokenizer splits it, as far as it matters here:
    (start, end) of each, whitespace and comments left out. A string, quoted name, word
    (keyword, name or number) or parameter (`:name`, `$a(…)`, `?7`) is one token, so
    parentheses inside them are not parentheses."""
    out, i, n = [], 0, len(sql)
    while i < n:
        start, c = i, sql[i]
        if c in _SPACE:
            i += 1
            continue
        if sql.startswith("--", i):
            end = sql.find("\n", i)
            i = n if end < 0 else end + 1
            continue
        if sql.startswith("/*", i):
            end = sql.find("*/", i + 2)
            i = n if end < 0 else end + 2
            continue
        if c in "'\"`[":
            # A doubled quote inside is an escaped quote: leaving and re-entering the quoted
            # span at once gives the same result.
            close = sql.find("]" if c == "[" else c, i + 1)
            i = n if close < 0 else close + 1
        elif c in ":@$#":
            i = variable_len(sql, i + 1)[0]
        elif c == "?":
            i += 1
            while i < n and sql[i].isascii() and sql[i].isdigit():
                i += 1
        elif _id_char(c):
            while i < n and _id_char(sql[i]):
                i += 1
        else:
            i += 1
        out.append((start, i))
    return out


def significant(sql: str) -> list[tuple[int, str]]:
    """Each token of `sql` by its offset and first character."""
    return [(start, sql[start]) for start, _ in tokens(sql)]


def unbalanced(sql: str) -> str | None:
    """Which parenthesis of `sql` does not pair up (as SQLite reads it), with a caret; or
    None."""
    opened: list[int] = []
    for at, c in significant(sql):
        if c == "(":
            opened.append(at)
        elif c == ")" and not opened:
            return _caret(sql, at, "closes nothing")
        elif c == ")":
            opened.pop()
    return _caret(sql, opened[0], "is never closed") if opened else None


def _caret(sql: str, at: int, what: str) -> str:
    line_start = sql.rfind("\n", 0, at) + 1
    line_end = sql.find("\n", at)
    line_end = len(sql) if line_end < 0 else line_end
    return (f"the '{sql[at]}' at column {at + 1} {what}; parentheses must pair up within the "
            f"text\n  {sql[line_start:line_end]}\n  {' ' * (at - line_start)}^")


def check_enclosed(sql: str, what: str) -> None:
    """An expression must stay inside the `WHERE (…)` it is put in: no NUL, something besides
    comments, and parentheses that pair up among themselves."""
    if "\0" in sql:
        raise SelectionError(f"{what} {sql!r}: the text holds a NUL character (at "
                             f"{sql.index(chr(0))}), where SQLite would stop reading")
    if not tokens(sql):
        raise SelectionError(f"{what} {sql!r}: the expression is empty (only whitespace or "
                             f"comments)")
    problem = unbalanced(sql)
    if problem is not None:
        raise SelectionError(f"{what} {sql!r}: {problem}")


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


def parameters(sql: str) -> tuple[int, dict[int, str]]:
    """How many parameters `sql` has and the name of each named one by its number, numbered
    as SQLite numbers them: `?` takes the next number, `?NNN` number NNN (named "?NNN" unless
    the number has a name), `:a`, `@a`, `$a`, `#a` the number of their first appearance or
    the next."""
    count, names = 0, {}
    for start, end in tokens(sql):
        token = sql[start:end]
        if token == "?":
            count += 1
        elif token[0] == "?":
            number = int(token[1:])
            if number > count:
                count = number
            names.setdefault(number, token)
        elif token[0] in ":@$#" and variable_len(token, 1) == (len(token), True):
            if token not in names.values():
                count += 1
                names[count] = token
    return count, names


def check_params(sql: str, params, what: str):
    """`params` checked against the SQL's parameters; returned as sqlite3 takes them."""
    count, numbered = parameters(sql)
    named = {n: name for n, name in numbered.items() if name[0] != "?"}
    names = list(dict.fromkeys(name[1:] for name in named.values()))
    positional = count - len(named)
    if params is None:
        params = ()
    if isinstance(params, (str, bytes)):
        raise TypeError(f"{what}: params must be a sequence (for ?) or a mapping (for :name), "
                        f"not {type(params).__name__}")
    if isinstance(params, Mapping):
        unknown = [k for k in params if k not in names]
        if unknown:
            have = ", ".join(named.values()) or "no named parameters"
            raise SelectionError(f"{what} {sql!r}: params has {unknown[0]!r}, but the SQL has "
                                 f"no parameter :{unknown[0]} (it has {have})")
        missing = [name for name in named.values() if name[1:] not in params]
        if missing:
            raise SelectionError(f"{what} {sql!r}: {missing[0]} has no value in params")
        if positional:
            raise SelectionError(f"{what} {sql!r}: the SQL has positional parameters (?), "
                                 f"which take a sequence of values, not a mapping")
        return {k: bindable(v, f":{k}", sql, what) for k, v in params.items()}
    try:
        values = list(params)
    except TypeError:
        raise TypeError(f"{what}: params must be a sequence (for ?) or a mapping (for :name), "
                        f"not {type(params).__name__}") from None
    if named:
        raise SelectionError(f"{what} {sql!r}: the SQL has named parameters "
                             f"({', '.join(named.values())}); pass params as a dict")
    if len(values) != positional:
        raise SelectionError(
            f"{what} {sql!r}: the SQL has {positional} positional parameter"
            f"{'' if positional == 1 else 's'} (?) and {len(values)} value"
            f"{'' if len(values) == 1 else 's'} {'was' if len(values) == 1 else 'were'} given "
            f"in params")
    return [bindable(v, f"value {k + 1}", sql, what) for k, v in enumerate(values)]


def bindable(value, which: str, sql: str, what: str):
    """`value` as sqlite3 binds it exactly (NumPy scalars as Python numbers), or
    SelectionError: a value sqlite3 would refuse or change (an int beyond 64 bits, NaN, which
    it binds as NULL, text that is not UTF-8)."""
    if isinstance(value, np.generic) and not isinstance(value, (np.str_, np.bytes_)):
        value = value.item()
    if value is None or isinstance(value, (bytes, bytearray, memoryview)):
        return value
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        if not -(1 << 63) <= value < (1 << 63):
            raise SelectionError(f"{what} {sql!r}: params {which} is {value}, beyond SQLite's "
                                 f"64-bit integers; pass it as a float or text if that is meant")
        return value
    if isinstance(value, float):
        if math.isnan(value):
            raise SelectionError(f"{what} {sql!r}: params {which} is NaN, which SQLite binds "
                                 f"as NULL and which matches nothing")
        return value
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as e:
            raise SelectionError(f"{what} {sql!r}: params {which} is text that is not valid "
                                 f"UTF-8 ({e.reason})") from None
        return str(value)
    raise SelectionError(f"{what} {sql!r}: params {which} is a {type(value).__name__}; a "
                         f"parameter takes None, an int, a float, a str or bytes")


def run_ids(conn: sqlite3.Connection, sql: str, params=None, what: str = "select", *,
            sql_timeout: float | None = None, sql_memory: int | None = None) -> np.ndarray:
    """The run ids (ascending, each once, int64) that `sql` selects with `params` bound,
    within `sql_timeout` seconds and `sql_memory` bytes of SQLite memory."""
    if not isinstance(sql, str):
        raise SelectionError(f"{what}: the SQL must be a str, not {type(sql).__name__}")
    timeout = DEFAULT_SQL_TIMEOUT if sql_timeout is None else sql_timeout
    memory = DEFAULT_SQL_MEMORY if sql_memory is None else sql_memory
    if not (isinstance(timeout, (int, float)) and timeout > 0 and math.isfinite(timeout)):
        raise SelectionError(f"{what}: sql_timeout must be a number of seconds above 0, not "
                             f"{timeout!r}")
    if not (isinstance(memory, int) and memory > 0):
        raise SelectionError(f"{what}: sql_memory must be a number of bytes above 0, not "
                             f"{memory!r}")
    details = has_table(conn, "run_details")
    query = query_text(sql, what)
    if query is None:
        check_enclosed(sql, what)
    bound = check_params(sql if query is None else query, params, what)
    if query is None:
        source = ("runs LEFT JOIN run_details ON run_details.run_id = runs.id" if details
                  else "runs")
        # The expression on lines of its own, so a trailing `-- comment` cannot swallow the rest.
        text = f"SELECT runs.id FROM {source} WHERE (\n{sql}\n) ORDER BY runs.id"
    else:
        text = query
    noun = "expression" if query is None else "query"
    known = np.array([r for (r,) in conn.execute("SELECT id FROM runs ORDER BY id")],
                     dtype=np.int64)
    watchdog = Watchdog(timeout, memory)
    try:
        with watchdog.watching(conn):
            cursor = conn.execute(text, bound)
            if query is not None and len(cursor.description or ()) != 1:
                names = ", ".join(d[0] for d in cursor.description or ())
                raise SelectionError(
                    f"{what} {sql!r}: the query returns {len(cursor.description or ())} "
                    f"columns ({names}); it must return one, the run ids, e.g. SELECT id FROM "
                    f"runs WHERE …")
            return read_ids(cursor, known, what, sql, noun)
    except (sqlite3.Error, sqlite3.Warning) as e:
        if watchdog.stopped is not None:
            raise SelectionError(f"{what} {sql!r}: {watchdog.stopped}") from None
        raise SelectionError(explain(what, sql, noun, str(e), columns(conn, details))) from None
    except OverflowError as e:
        raise SelectionError(f"{what} {sql!r}: {e}") from None


def read_ids(cursor, known: np.ndarray, what: str, sql: str, noun: str) -> np.ndarray:
    """The run ids the cursor returns, ascending and each once; every value must be one of
    `known` (ascending). Memory stays bounded by the pack's runs, however many rows come."""
    chosen = np.zeros(known.size, dtype=bool)
    unknown: set[int] = set()
    row = 0
    while len(unknown) <= UNKNOWN_KEPT:
        batch = cursor.fetchmany(65536)
        if not batch:
            break
        for k, (v,) in enumerate(batch):
            if type(v) is not int:
                shown = "NULL" if v is None else f"{v!r} ({type(v).__name__})"
                raise SelectionError(
                    f"{what} {sql!r}: row {row + k + 1} of the {noun}'s result is {shown}, not "
                    f"a run id; the {noun} must return the run ids (an integer column such as "
                    f"runs.id)")
        row += len(batch)
        ids = np.unique(np.array([v for (v,) in batch], dtype=np.int64))
        slot = np.minimum(np.searchsorted(known, ids), max(known.size - 1, 0))
        found = known.size > 0
        hit = (known[slot] == ids) if found else np.zeros(ids.size, dtype=bool)
        if found:
            chosen[slot[hit]] = True
        unknown.update(ids[~hit].tolist()[:UNKNOWN_KEPT + 1])
    if unknown:
        span = f"ids {known[0]}..={known[-1]}" if known.size else "no runs"
        count = (f"more than {UNKNOWN_KEPT} values" if len(unknown) > UNKNOWN_KEPT else
                 f"{len(unknown)} value{'' if len(unknown) == 1 else 's'}")
        shown = sorted(unknown)
        listed = ", ".join(map(str, shown[:5])) + (", …" if len(shown) > 5 else "")
        raise SelectionError(
            f"{what} {sql!r}: the {noun} returns {count} that "
            f"{'is' if len(unknown) == 1 else 'are'} not a run id of the pack: {listed} (the "
            f"pack has {known.size} runs, {span}); it must return run ids, such as runs.id")
    return known[chosen]


def _sqlite_memory_used():
    """A function returning SQLite's heap in use (sqlite3_memory_used of the library this
    Python's sqlite3 uses), or None where that library does not export it."""
    import _sqlite3
    for lib in (getattr(_sqlite3, "__file__", None), None):
        try:
            f = ctypes.CDLL(lib).sqlite3_memory_used
        except (OSError, AttributeError, TypeError):
            continue
        f.restype, f.argtypes = ctypes.c_int64, []
        return f
    return None


_MEMORY_USED = None


def _memory_used():
    """SQLite's heap in use in this process, or the process's peak resident memory where
    SQLite's counter is not reachable (bytes; None when neither is)."""
    global _MEMORY_USED
    if _MEMORY_USED is None:
        f = _sqlite_memory_used()
        if f is None:
            try:
                import resource
                scale = 1 if __import__("sys").platform == "darwin" else 1024
                f = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale  # noqa: E731
            except ImportError:
                f = lambda: None  # noqa: E731
        _MEMORY_USED = f
    return _MEMORY_USED()


class Watchdog:
    """SQLite's progress handler while a selection runs: stops the statement once it has run
    `timeout` seconds or taken `memory` bytes more than when it began, or on Ctrl-C (whose
    KeyboardInterrupt is raised once SQLite has stopped; sqlite3 would swallow it if it came
    up inside the handler)."""

    def __init__(self, timeout: float, memory: int):
        self.timeout, self.memory = timeout, memory
        self.stopped: str | None = None
        self.interrupted = False

    def _check(self) -> int:
        try:
            if self.interrupted:
                return 1
            if time.monotonic() >= self.deadline:
                self.stopped = (f"stopped after {self.timeout:g} s, its time limit (a WITH "
                                f"RECURSIVE query that never ends?); give it longer with "
                                f"sql_timeout=SECONDS")
                return 1
            used = _memory_used()
            if used is not None and self.baseline is not None and \
                    used - self.baseline > self.memory:
                self.stopped = (f"stopped: it needed more than {self.memory / (1 << 20):.1f} "
                                f"MiB of memory, its limit (a WITH RECURSIVE query that grows "
                                f"without end?); give it more with sql_memory=BYTES")
                return 1
            return 0
        except KeyboardInterrupt:
            self.interrupted = True
            return 1

    def _on_sigint(self, signum, frame):
        self.interrupted = True

    class _Watching:
        def __init__(self, dog: "Watchdog", conn: sqlite3.Connection):
            self.dog, self.conn, self.previous = dog, conn, None

        def __enter__(self):
            dog = self.dog
            dog.deadline = time.monotonic() + dog.timeout
            dog.baseline = _memory_used()
            if threading.current_thread() is threading.main_thread() and \
                    signal.getsignal(signal.SIGINT) is signal.default_int_handler:
                self.previous = signal.signal(signal.SIGINT, dog._on_sigint)
            self.conn.set_progress_handler(dog._check, CHECK_EVERY_OPS)
            return dog

        def __exit__(self, kind, value, tb):
            self.conn.set_progress_handler(None, CHECK_EVERY_OPS)
            if self.previous is not None:
                signal.signal(signal.SIGINT, self.previous)
            if self.dog.interrupted:
                raise KeyboardInterrupt
            return False

    def watching(self, conn: sqlite3.Connection) -> "Watchdog._Watching":
        return Watchdog._Watching(self, conn)


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
