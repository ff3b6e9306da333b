"""`serve-bench`: launches or reaches each engine's server, drives it with the scenario's load (client, load
generator, capacity search, profiled passes, telemetry) and writes the run files as it goes."""
