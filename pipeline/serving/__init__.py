"""Translating real input: our engine (`ours`), the CTranslate2 engine (`ct2`), the
real-input text processing (`textproc`), the entry point every caller shares (`translator`) and the
MLflow pyfunc (`pyfunc`). Imports every layer below, never `pipeline.ops`.
"""
