"""`python -m dinfer_batch` is the `dinfer-batch` command."""

from dinfer_batch.cli import main

main()
