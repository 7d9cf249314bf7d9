"""The one exception type for mistakes a user can fix."""


class LincorrError(ValueError):
    """A user-facing error: the message is one line that says what to do."""
