"""The errors of constraints that cannot be honoured."""


class ConstraintError(ValueError):
    """The constraint cannot be honoured; the message names the keyword or limit."""


class ConstraintFailures(ValueError):
    """The prompts of one call whose constraints cannot be compiled: index -> reason."""

    def __init__(self, errors: dict[int, str]) -> None:
        self.errors = errors
        first = min(errors)
        more = f" (and {len(errors) - 1} more prompts)" if len(errors) > 1 else ""
        super().__init__(f"prompt {first}: {errors[first]}{more}")


class ConstraintTooLarge(ConstraintFailures):
    """The prompts of one call whose constrained rows would each hold more than the
    engine's constraint memory budget (dinfer_engine/row_budget.py): index -> reason."""
