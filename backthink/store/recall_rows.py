"""Recall's reads of rows by id on SQL, SQLite and PostgreSQL alike: hits, and their neighbours.

A recall source (`backthink.memory.pipeline.RecallSource`) finds row ids in
its indexes; these statements read the rows an owner may recall among them
(`visible`), and the messages beside the best matched ones (`neighbours`): the
question a recalled answer replied to, the answer a recalled question got.
A neighbour is the adjacent message of the same owner and session in the
order the window uses, (created_at, id), delivered and below the window.
One statement finds every neighbour of every anchor, each by one step of
the (owner_id, session_id, created_at, id) index.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import TextualSelect, bindparam, text
from sqlalchemy.engine import Connection

from backthink.memory.scoring import Candidate
from backthink.models import MAIN_SESSION, MemoryKind
from backthink.store.columns import UTCDateTime

_SIDE = (
    "SELECT a.id AS anchor, n.id, n.text, n.created_at, n.role, n.origin"
    " FROM message a JOIN message n ON n.id = ("
    "SELECT p.id FROM message p WHERE p.owner_id = a.owner_id AND p.session_id = a.session_id"
    " AND (p.created_at, p.id) {cmp} (a.created_at, a.id) AND p.id < :before AND {delivered}"
    " ORDER BY p.created_at {order}, p.id {order} LIMIT 1)"
    " WHERE a.id = :a{i} AND a.owner_id = :owner"
)


def _delivered(conn: Connection, alias: str) -> str:
    # Neither a failed push nor a turn an edit left behind stands beside a recalled message.
    if conn.dialect.name == "postgresql":
        return f"NOT {alias}.undelivered AND NOT {alias}.superseded"
    return f"{alias}.undelivered = 0 AND {alias}.superseded = 0"


def _query(sql: str) -> TextualSelect:
    """A text query whose `created_at` comes back as an aware UTC datetime, ids expanding."""
    return text(sql).bindparams(bindparam("ids", expanding=True)).columns(created_at=UTCDateTime())


def visible(
    conn: Connection, side: str, ids: Sequence[int], *, owner_id: str, before: int | None
) -> list[Candidate]:
    """The rows among `ids` the owner may recall (see `RecallSource.rows`).

    The rows are read by primary key and picked here: given the owner in the
    WHERE clause, SQLite would walk the owner's index instead, every row of it.
    """
    if not ids:
        return []
    if side == "memory":
        sql = "SELECT id, owner_id, kind, text, created_at FROM memory WHERE id IN :ids"
        return [
            Candidate("memory", int(i), body, at, MemoryKind(kind))
            for i, owner, kind, body, at in conn.execute(_query(sql), {"ids": list(ids)})
            if owner == owner_id
        ]
    if before is None:
        return []
    sql = (
        "SELECT id, owner_id, session_id, undelivered, superseded, text, created_at, role, origin"
        " FROM message WHERE id IN :ids"
    )
    return [
        Candidate("message", int(i), body, at, role=role, origin=origin)
        for i, owner, session, undelivered, superseded, body, at, role, origin in conn.execute(
            _query(sql), {"ids": list(ids)}
        )
        if owner == owner_id
        and session == MAIN_SESSION
        and not undelivered
        and not superseded
        and i < before
    ]


def neighbours(
    conn: Connection, anchors: Sequence[int], *, owner_id: str, before: int
) -> dict[int, list[Candidate]]:
    """Per anchor message id, the messages just before and after it (below id `before`)."""
    if not anchors:
        return {}
    params: dict[str, Any] = {f"a{i}": anchor for i, anchor in enumerate(anchors)}
    params.update(before=before, owner=owner_id)
    delivered = _delivered(conn, "p")
    parts = [
        _SIDE.format(cmp=cmp, order=order, delivered=delivered, i=i)
        for i in range(len(anchors))
        for cmp, order in (("<", "DESC"), (">", "ASC"))
    ]
    statement = text(" UNION ALL ".join(parts)).columns(created_at=UTCDateTime())
    found: dict[int, list[Candidate]] = {}
    for anchor, i, body, at, role, origin in conn.execute(statement, params):
        found.setdefault(int(anchor), []).append(
            Candidate("message", int(i), body, at, role=role, origin=origin)
        )
    return found
