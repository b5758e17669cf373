"""The DVC pipeline as a Prefect 3 flow, run once or served on a schedule for retraining
(docs/retraining.md): `python -m pipeline.ops.flow run | serve | rollback` (`cli`). The flow and
its tasks are in `tasks`, the DVC calls in `dvc_calls`, the run's case and summary in `summary`.
"""
