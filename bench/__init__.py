"""Benchmarks: training throughput and MFU, decoding speed, peak memory.

One command each, run from the repository root (they read `params.yaml`, the corpus and the
SentencePiece model the pipeline wrote); each prints its table and merges its figures into
`reports/bench.json`, then regenerates `reports/bench.md`:

    python -m bench.train_speed [--configs tiny,default] [--steps N] [--warmup N]
    python -m bench.decode_speed [--sentences N]
    python -m bench.memory [--steps N] [--sentences N]

Baselines live beside them: `bench.naive` (the tutorial's style) and `bench.nn_transformer`
(the same architecture on `torch.nn.Transformer`); `bench.flops` measures the matmul peak that MFU
divides by.
"""
