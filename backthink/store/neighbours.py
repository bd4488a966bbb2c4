"""The messages beside recalled ones: the message just before and just after each, in SQL.

Recall brings along the neighbours of its best matched messages (see
`backthink.memory.recall.with_neighbours`): the question a recalled answer
replied to, the answer a recalled question got. A neighbour is the
adjacent message of the same owner and session in the order the window
uses, (created_at, id), delivered and below the window. One statement finds
every neighbour of every anchor, each by one step of the
(owner_id, session_id, created_at, id) index, on SQLite and on PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import TextualSelect, text
from sqlalchemy.engine import Connection

from backthink.memory import recall
from backthink.store.columns import UTCDateTime

_SIDE = (
    "SELECT a.id AS anchor, n.id, n.text, n.created_at, n.role, n.origin"
    " FROM message a JOIN message n ON n.id = ("
    "SELECT p.id FROM message p WHERE p.owner_id = a.owner_id AND p.session_id = a.session_id"
    " AND (p.created_at, p.id) {cmp} (a.created_at, a.id) AND p.id < :before AND {delivered}"
    " ORDER BY p.created_at {order}, p.id {order} LIMIT 1)"
    " WHERE a.id = :a{i}"
)


def _sql(anchors: int, *, postgres: bool) -> TextualSelect:
    # Neither a failed push nor a turn an edit left behind stands beside a recalled message.
    delivered = (
        "NOT p.undelivered AND NOT p.superseded"
        if postgres
        else "p.undelivered = 0 AND p.superseded = 0"
    )
    parts = [
        _SIDE.format(cmp=cmp, order=order, delivered=delivered, i=i)
        for i in range(anchors)
        for cmp, order in (("<", "DESC"), (">", "ASC"))
    ]
    return text(" UNION ALL ".join(parts)).columns(created_at=UTCDateTime())


def neighbours(
    conn: Connection, anchors: Sequence[int], *, before: int
) -> dict[int, list[recall.Candidate]]:
    """Per anchor message id, the messages just before and after it (below id `before`)."""
    if not anchors:
        return {}
    params: dict[str, Any] = {f"a{i}": anchor for i, anchor in enumerate(anchors)}
    params["before"] = before
    statement = _sql(len(anchors), postgres=conn.dialect.name == "postgresql")
    found: dict[int, list[recall.Candidate]] = {}
    for anchor, i, body, at, role, origin in conn.execute(statement, params):
        found.setdefault(int(anchor), []).append(
            recall.Candidate("message", int(i), body, at, role=role, origin=origin)
        )
    return found
