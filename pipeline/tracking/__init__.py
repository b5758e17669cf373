"""MLflow: the run a training logs to (`runs`), what that run says about itself (`describe`) and
the model registry's aliases (`registry`). Imports only `pipeline.core` and `pipeline.data`.
"""
