"""An English→German Transformer (Vaswani et al. 2017) and the pipeline that trains it on Multi30k.

Sub-packages by layer, each importing only from those before it (`tests/test_layers.py`):
`core` < `data` < `model` < `tracking` < `training` < `serving` < `ops`.
"""

LAYERS = ("core", "data", "model", "tracking", "training", "serving", "ops")
