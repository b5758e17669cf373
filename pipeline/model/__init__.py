"""The Transformer (`transformer`), greedy (`greedy`) and beam search (`beam`), and attention maps
(`attention_maps`). Imports only `pipeline.core` and `pipeline.data`.
"""
