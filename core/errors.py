"""Exceptions users can cause. Each message names the field, file, line or key that is wrong."""


class AmpConsoleError(Exception):
    """Base class: an error caused by user input, shown to the user as one line."""


class ConfigError(AmpConsoleError):
    """A RunConfig field (or CLI flag / TOML key) has an invalid value."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(f"{field}: {message}")


class PrecisionError(ConfigError):
    """A precision mode the selected device cannot run."""

    def __init__(self, message: str):
        super().__init__("precision", message)


class DeviceError(AmpConsoleError):
    """A device that does not exist, vanished, or tensors split across devices."""


class DataError(AmpConsoleError):
    """A data file that cannot be read: names the file and the line or column."""


class CheckpointError(AmpConsoleError):
    """A checkpoint that cannot be loaded safely or does not fit the run."""


class UserCodeError(AmpConsoleError):
    """The user's own code raised while a run was set up: one line with its file:line; `details` the traceback."""

    def __init__(self, message: str, details: str = ""):
        super().__init__(message)
        self.details = details


class TaskOutputError(AmpConsoleError):
    """A task method returned something the engine cannot use (one line: task, method, expected, got)."""
