"""The error of a constraint that cannot be honoured."""


class ConstraintError(ValueError):
    """The constraint cannot be honoured; the message names the keyword or limit."""
