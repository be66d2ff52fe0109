"""Running: what a worker does with a chunk. Choosing and claiming it (dispatch, permits),
the chunk's transactions, its engine calls and their bounds, the results written as they
land, lines that took workers down, and the engine options a worker process loads with."""
