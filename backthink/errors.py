"""The error family of backthink: one root, small subclasses that carry their data."""

from __future__ import annotations

from backthink.models import Reason


class BackthinkError(Exception):
    """Root of every error backthink raises on purpose; its message is one clear line."""

    exit_code = 1


class ConfigError(BackthinkError):
    """The configuration file or an environment override is wrong."""

    exit_code = 2


class InputError(BackthinkError):
    """Bad input from the command line or an import file."""

    exit_code = 2


class StoreError(BackthinkError):
    """The database could not be read or written."""


class ModelError(BackthinkError):
    """The model endpoint failed: HTTP error, refused connection, or an unusable reply."""

    reason: Reason = Reason.MODEL_ERROR


class ModelTimeoutError(ModelError):
    """The model endpoint did not answer within the configured timeout."""

    reason: Reason = Reason.MODEL_TIMEOUT


class ModelNotConfiguredError(ModelError):
    """No model endpoint is configured, so no round can think."""


class ToolsRefusedError(ModelError):
    """The endpoint refused a request because it carried tool definitions."""


class DeliveryError(BackthinkError):
    """A channel could not deliver a message."""

    def __init__(self, channel: str, detail: str, *, retryable: bool = True) -> None:
        super().__init__(f"channel {channel!r}: {detail}")
        self.channel = channel
        self.detail = detail
        self.retryable = retryable
