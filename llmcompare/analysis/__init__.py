"""Pure functions over saved records: metrics, steady state, trust, verdicts, capacity, GEMM attribution and
kernel facts. Nothing here measures or reads a server."""
