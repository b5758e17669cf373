"""Translating real input: our PyTorch engine (`torch_engine`), the CTranslate2 engine (`ct2`), the
real-input text processing (`sentences`, `spans`, `protection`, `casing`, `repeats`), the entry
point every caller shares (`translator`) and the MLflow pyfunc (`pyfunc`), served by MLflow's
scoring app behind a guard (`server`; `mlflow_server` runs it for the tests and the load test).
Imports every layer below, never `pipeline.ops`.
"""
