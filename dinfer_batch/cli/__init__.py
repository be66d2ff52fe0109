"""The `dinfer-batch` command line: the group and its error handling (`app`), one module per
family of commands, and the progress display."""

from dinfer_batch.cli.app import main

__all__ = ["main"]
