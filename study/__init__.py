"""The recipe study beside the product: the committed record of candidate recipes
(`reports/experiments.jsonl`), its tables and curve (`reports/experiments.md`) and the length-penalty
sweep. Run as `python -m study.record`, `study.tables`, `study.length_penalty` (docs/study.md).
It imports `pipeline`; `pipeline` never imports it, and it is not part of the installed package.
"""
