"""MLflow: where records go (`store`), the tracker interface the loop calls (`tracker`) and its
MLflow implementation (`mlflow_tracker`), a train stage's run (`train_run`), what a run says about
itself (`describe`) and the model registry's aliases (`registry`). Imports only `pipeline.core` and
`pipeline.data`.
"""
