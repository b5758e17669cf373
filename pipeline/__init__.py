"""An English→German Transformer (Vaswani et al. 2017) and the pipeline that trains it on Multi30k."""
