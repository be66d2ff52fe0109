"""Schedules: jobs made at fixed times from a stored spec (`store`), their triggers
(`triggers`), and the scheduler loop that `dinfer-batch beat` runs (`beat`)."""
