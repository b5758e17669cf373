"""Training: the loop (`loop`), checkpoints and the final model (`checkpoint`), validation
(`validation`), DDP (`distributed`), warm start from the champion (`warm_start`) and the console
progress (`progress`). Imports `pipeline.core`, `data`, `model` and `tracking`.
"""
