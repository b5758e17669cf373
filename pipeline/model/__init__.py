"""The Transformer (`transformer`), greedy (`greedy`) and beam search (`beam`), attention maps
(`attention_maps`) and the matmul FLOPs of a training step (`flops`). Imports only
`pipeline.core` and `pipeline.data`.
"""
