"""TermCounts: cached document counts of recall terms, moved on by the rows a table gains."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from backthink.memory import terms

DF_CACHE_TERMS = 50_000
"""Cached document counts kept at most, per index, before the cache starts over."""


class TermCounts:
    """Document counts of recall terms in one indexed table, standing at id `mark`.

    A count is read once from the database (by the backend's own query) and
    then moved on by the rows the table gains: `advance` adds each new text
    to the counts of the cached terms it holds. A mark that went back, or too
    many new rows at once, starts the cache over.
    """

    def __init__(self, table: str) -> None:
        """Start with no counts, at an unknown mark (-1)."""
        self.table = table
        self.mark = -1
        self.df: dict[str, int] = {}
        self._by_piece: dict[str, list[str]] = {}

    def clear(self, mark: int = -1) -> None:
        """Forget every count; they stand at `mark` from now on (-1: unknown)."""
        self.df.clear()
        self._by_piece.clear()
        self.mark = mark

    def advance(
        self, since: int | None, cursor: int, rows: Sequence[tuple[int, str]] | None
    ) -> None:
        """Count the rows added from `since` to `cursor`; the counts then stand at `cursor`.

        The counts may have moved on meanwhile (another call's rows, read while
        this one's write was under way): only rows past `mark` are counted.
        Unknown rows (None), or counts that stand before `since`, start over.
        """
        if rows is None or since is None or self.mark < since:
            self.clear(cursor)
            return
        if self.mark >= cursor:
            return
        for row_id, body in rows:
            if row_id <= self.mark:
                continue
            low = body.lower()
            pieces = {low[i : i + 2] for i in range(len(low) - 1)}
            for piece in pieces:
                for term in self._by_piece.get(piece, ()):
                    if terms.holds(low, term):
                        self.df[term] += 1
        self.mark = cursor

    def missing(self, terms: Iterable[str]) -> list[str]:
        """The terms without a count yet, each once; past `DF_CACHE_TERMS` the cache starts over."""
        wanted = list(dict.fromkeys(terms))
        missing = [t for t in wanted if t not in self.df]
        if len(self.df) + len(missing) > DF_CACHE_TERMS:
            self.clear(self.mark)
            return wanted
        return missing

    def store(self, term: str, count: int) -> None:
        """Keep the count of a term read from the database."""
        self.df[term] = count
        self._by_piece.setdefault(term[:2], []).append(term)
