"""The web channel: the owner's main session, where the message already waits."""

from __future__ import annotations

from backthink.models import OutgoingMessage


class WebChannel:
    """The main session itself, read by the chat app's own web interface.

    A round writes the message back into the main session in the same
    transaction as its outbox row, so by the time this channel is asked to send,
    the message is already where the owner will see it.
    """

    def __init__(self, name: str = "web") -> None:
        """Create the channel.

        Args:
            name: the channel's name in the configuration.
        """
        self.name = name
        # The write-back committed with the outbox row is what the owner reads.
        self.delivered_by_writeback = True

    @property
    def connected(self) -> bool:
        """Always True: the main session is always there to read."""
        return True

    async def send(self, message: OutgoingMessage) -> None:
        """Succeed without I/O: the write-back already delivered the message.

        Args:
            message: the message of one round.
        """
        return None
