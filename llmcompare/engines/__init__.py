"""Everything known about each engine kind: its command line, flags, greedy request body, log, environment,
version, server process and the int4 GEMM backends it runs. The registry is registry.ENGINES."""
