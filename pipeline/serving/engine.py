"""The one seam between the translation pipeline and a decoder: our Transformer
(`pipeline.serving.torch_engine.TorchEngine`) or a CTranslate2 export (`pipeline.serving.ct2.Ct2Engine`).

An engine is loaded once, on one device, with the tokenizer it was trained with; everything above
it (`pipeline.serving.translator`: sentences, protected spans, casing) is the same for both.
"""

from __future__ import annotations

from typing import Protocol

from pipeline.core.config import SearchConfig
from pipeline.data.tokenizer import Tokenizer


class Engine(Protocol):
    """Translates model inputs (pre-processed sentences) into detokenised target text."""

    tokenizer: Tokenizer
    device: str  # "cpu" or "cuda" (what the engine runs on)

    def translate(self, texts: list[str], cfg: SearchConfig, progress: bool = False) -> list[str]:
        """One output per text, in order ("" for a blank text), by `cfg`'s search."""
        ...

    def n_best(self, texts: list[str], cfg: SearchConfig, n: int) -> list[list[tuple[str, float]]]:
        """The `n` best outputs per text, best first, as (text, length-normalised log-prob under
        the GNMT penalty); [] for a blank text.

        Raises:
            ValueError: `n` outside 1..cfg.beam_size.
        """
        ...
