"""The records that cross a file or process boundary: scenarios, run files, request rows, kernel runs,
profiles; their JSON codec and the readers of older files. Standard library only (pyproject's import contracts)."""
