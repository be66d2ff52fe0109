"""The workers as a fleet: their heartbeats and registry (`registry`), the background
thread each worker runs (`heartbeat`), and the reaper that gives back to the queue what no
live worker will finish (`reaper`)."""
