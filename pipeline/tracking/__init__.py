"""MLflow: the run a training logs to (`runs`) and the model registry's aliases (`registry`).
Imports only `pipeline.core` and `pipeline.data`.
"""
