"""Training: the loop (`loop`), checkpoints (`checkpoint`), the final model (`final_model`), validation
(`validation`), DDP (`distributed`), warm start from the champion (`warm_start`) and the console
progress (`progress`). Imports `pipeline.core`, `data`, `model` and `tracking`.
"""
