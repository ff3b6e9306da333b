"""Models without a hub: `make-model` checkpoints (random weights, real tokenizers), AWQ packing, and a model's
GEMM shapes from its config.json."""
