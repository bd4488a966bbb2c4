"""What a client learns of its endpoint, kept in the database's marks for every process.

An endpoint that refused the json_schema form of `response_format` is sent
the older json_object form. Learned in one process, it is written down, so
the next `think`, a worker or the daemon after a restart does not ask in the
refused form again (one failed request each); after `SCHEMA_FORM_HOLD` the
endpoint is asked again, as it may have been upgraded. The mark is per
endpoint and model, like the tools refusal's.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Final

import structlog

from backthink.config import ModelSettings
from backthink.errors import StoreError
from backthink.ports import Clock, EndpointKey, Marks

log = structlog.get_logger(__name__)

SCHEMA_FORM_HOLD: Final = timedelta(days=1)
# The endpoint's mark of its refusal (see `backthink.ports.Marks`).
SCHEMA_FORM_REFUSED: Final = "schema_form_refused"


class SchemaFormMemory:
    """Whether this endpoint and model read only the older schema form, as any process learned."""

    def __init__(self, settings: ModelSettings, marks: Marks | None, clock: Clock | None) -> None:
        self._marks = marks if clock is not None else None
        self._clock = clock
        self._endpoint = EndpointKey(settings.base_url, settings.name)
        self._read = False

    async def older_form(self) -> bool:
        """True when a process learned, less than `SCHEMA_FORM_HOLD` ago, to send the older form.

        The marks are read once per client; a failed read counts as not learned.
        """
        if self._read or self._marks is None or self._clock is None:
            return False
        self._read = True
        try:
            at = await self._marks.marked_at(self._endpoint, SCHEMA_FORM_REFUSED)
        except StoreError as exc:
            log.warning("model.schema_form_unread", error=str(exc))
            return False
        return at is not None and self._clock.now() - at < SCHEMA_FORM_HOLD

    async def refused(self) -> None:
        """Write down that the endpoint refused the json_schema form now."""
        if self._marks is None or self._clock is None:
            return
        try:
            await self._marks.mark(self._endpoint, SCHEMA_FORM_REFUSED, self._clock.now())
        except StoreError as exc:
            log.warning("model.schema_form_unsaved", error=str(exc))
