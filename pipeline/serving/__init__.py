"""Translating real input: our PyTorch engine (`torch_engine`), the CTranslate2 engine (`ct2`), the
real-input text processing (`sentences`, `spans`, `protection`, `casing`, `repeats`), the entry
point every caller shares (`translator`) and the MLflow pyfunc (`pyfunc`), served by
`mlflow models serve` (`mlflow_server`). Imports every layer below, never `pipeline.ops`.
"""
