"""The error of a tensor-parallel replica that lost a rank (torch-free, so that the
service can catch it without importing the engine)."""


class RankFailure(RuntimeError):
    """A rank of a tensor-parallel engine died, hung past the collective timeout, or the
    ranks fell out of step; the engine's ranks are stopped and it cannot be used again.
    The replica should be restarted as a whole."""
