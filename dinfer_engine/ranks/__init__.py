"""The rank runtime of a tensor-parallel replica (docs/adr/011): rank 0 starts, feeds and
stops the helper ranks; every rank runs the same commands over the parallel maths below."""
