"""Data: the Multi30k download (`multi30k`), incoming pairs (`incoming`), the warm-up task
(`warmup`), the SentencePiece tokenizer (`tokenizer`), the placeholder symbols and `protect_pair`
(`placeholders`), token batching (`batching`) and the translation files on disk (`translations`).
Imports only `pipeline.core`.
"""
