"""Data: the Multi30k download (`multi30k`), incoming pairs (`incoming`), the number-to-words warm-up task
(`warmup`), the SentencePiece tokenizer (`tokenizer`), the placeholder symbols and `protect_pair`
(`placeholders`), the training set tokenized once (`prepare`) into its memory-mapped form
(`corpus`), token batching (`batching`) and the translation files on disk (`translations`).
Imports only `pipeline.core`.
"""
