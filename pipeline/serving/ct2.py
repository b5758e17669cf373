"""Export to CTranslate2 (OpenNMT's inference engine) through its Python spec API, and translation
with the exported model ranked under our GNMT length penalty (the command: `pipeline.ops.export`;
what maps to what: docs/decoding.md).
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from pipeline.core.config import SearchConfig
from pipeline.core.errors import CheckpointError, ConfigError
from pipeline.data.batching import longest_first, pad
from pipeline.data.tokenizer import Tokenizer
from pipeline.model.beam import check_n_best, gnmt_length_penalty
from pipeline.model.greedy import max_lengths
from pipeline.model.transformer import MultiHeadAttention, Transformer, sinusoid_positions

MAX_POSITIONS = 1024  # rows of the exported position table (CTranslate2's default max_input_length)
LN_EPS = 1e-5  # torch.nn.LayerNorm's default, which our model uses


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().float().cpu().numpy().copy()


def _linear(spec, layer: nn.Linear) -> None:
    spec.weight = _np(layer.weight)
    if layer.bias is not None:
        spec.bias = _np(layer.bias)


def _norm(spec, norm: nn.LayerNorm) -> None:
    spec.gamma, spec.beta = _np(norm.weight), _np(norm.bias)


def _attention(spec, attn: MultiHeadAttention) -> None:
    """Ours: fused q,k,v rows (self) or q and fused k,v (cross) -> CTranslate2's linear list."""
    if attn.cross:
        _linear(spec.linear[0], attn.q_proj)
        _linear(spec.linear[1], attn.kv_proj)
    else:
        _linear(spec.linear[0], attn.qkv_proj)
    _linear(spec.linear[-1], attn.out_proj)


def _inputs(spec, embedding: nn.Embedding, d_model: int) -> None:
    emb = spec.embeddings[0] if isinstance(spec.embeddings, list) else spec.embeddings
    emb.weight = _np(embedding.weight)
    spec.scale_embeddings = True
    spec.position_encodings.encodings = _np(sinusoid_positions(torch.arange(MAX_POSITIONS), d_model))


def transformer_spec(model: Transformer, pieces: list[str]):
    """Our model -> a `ctranslate2.specs.TransformerSpec` with the vocabulary `pieces` (by id)."""
    from ctranslate2.specs import common_spec
    from ctranslate2.specs import transformer_spec as ts

    cfg = model.cfg
    spec = ts.TransformerSpec.from_config(
        cfg.n_layers, cfg.n_heads, pre_norm=cfg.pre_norm, activation=common_spec.Activation.RELU
    )
    _inputs(spec.encoder, model.src_embed, cfg.d_model)
    _inputs(spec.decoder, model.tgt_embed, cfg.d_model)
    for layer_spec, layer in zip(spec.encoder.layer, model.encoder, strict=True):
        _attention(layer_spec.self_attention, layer.self_attn)
        _norm(layer_spec.self_attention.layer_norm, layer.res1.norm)
        _linear(layer_spec.ffn.linear_0, layer.ffn.w1)
        _linear(layer_spec.ffn.linear_1, layer.ffn.w2)
        _norm(layer_spec.ffn.layer_norm, layer.res2.norm)
    for layer_spec, layer in zip(spec.decoder.layer, model.decoder, strict=True):
        _attention(layer_spec.self_attention, layer.self_attn)
        _norm(layer_spec.self_attention.layer_norm, layer.res1.norm)
        _attention(layer_spec.attention, layer.cross_attn)
        _norm(layer_spec.attention.layer_norm, layer.res2.norm)
        _linear(layer_spec.ffn.linear_0, layer.ffn.w1)
        _linear(layer_spec.ffn.linear_1, layer.ffn.w2)
        _norm(layer_spec.ffn.layer_norm, layer.res3.norm)
    if cfg.pre_norm:
        _norm(spec.encoder.layer_norm, model.enc_norm)
        _norm(spec.decoder.layer_norm, model.dec_norm)
    spec.decoder.projection.weight = _np(
        model.tgt_embed.weight if model.out_proj is None else model.out_proj.weight
    )
    spec.register_source_vocabulary(pieces)
    spec.register_target_vocabulary(pieces)
    spec.config.add_source_eos = True
    spec.config.layer_norm_epsilon = LN_EPS
    return spec


def export_ctranslate2(model: Transformer, tokenizer: Tokenizer, out_dir: str | Path) -> Path:
    """Write our model as a CTranslate2 model directory `out_dir` (fp32). An earlier export there
    is replaced; any other existing path is refused (the converter deletes what it replaces).

    Raises:
        ConfigError: `out_dir` exists and is not an empty folder or a CTranslate2 export; or the
            model's vocabulary size differs from the tokenizer's.
    """
    from ctranslate2.converters.converter import Converter

    out = Path(out_dir)
    if out.exists() and not replaceable(out):
        raise ConfigError(f"--out {out}: exists and is not a CTranslate2 export; choose a new folder")
    if model.vocab_size != tokenizer.vocab_size:
        raise ConfigError(
            f"model vocabulary {model.vocab_size} does not match the tokenizer's {tokenizer.vocab_size}"
        )
    spec = transformer_spec(model.float().eval(), tokenizer.id_to_piece(range(tokenizer.vocab_size)))

    class OurConverter(Converter):
        def _load(self):
            return spec

    return Path(OurConverter().convert(str(out_dir), force=True))


def replaceable(path: Path) -> bool:
    """An empty folder, or an earlier export (it holds `model.bin`)."""
    return path.is_dir() and (not any(path.iterdir()) or (path / "model.bin").is_file())


def load_ct2(model_dir: str | Path, compute_type: str = "default", threads: int = 0, device: str = "cpu"):
    """A `ctranslate2.Translator` on `device` ("cpu" or "cuda"); `compute_type` e.g. "float32",
    "int8"; `threads` intra-op threads (0: CTranslate2's default)."""
    import ctranslate2

    return ctranslate2.Translator(
        str(model_dir), device=device, compute_type=compute_type, intra_threads=threads
    )


def ct2_hypotheses(translator, tokenizer: Tokenizer, sentences: list[str], cfg: SearchConfig) -> list[list]:
    """Per sentence, CTranslate2's `cfg.beam_size` finished hypotheses ranked by our GNMT penalty.

    As (piece ids, normalised log-prob), best first (see the module doc); [] for a blank input. Sentences
    go `cfg.batch_size` at a time, grouped by their length limit."""
    ids = tokenizer.encode_batch(list(sentences))
    todo = [i for i, text in enumerate(sentences) if text.strip()]
    outputs: list[list] = [[] for _ in sentences]
    if not todo:
        return outputs
    src = pad([ids[i] + [tokenizer.eos_id] for i in todo], tokenizer.pad_id)  # as search counts it
    groups: dict[int, list[int]] = defaultdict(list)
    limits = max_lengths(src, tokenizer.pad_id, cfg.max_len_a, cfg.max_len_b).tolist()
    for i, limit in zip(todo, limits, strict=True):
        groups[limit].append(i)
    piece_id = {p: i for i, p in enumerate(tokenizer.id_to_piece(range(tokenizer.vocab_size)))}
    banned = [tokenizer.id_to_piece([i]) for i in (tokenizer.pad_id, tokenizer.bos_id)]
    for limit, members in sorted(groups.items()):
        for chunk in longest_first(members, [len(x) for x in ids], cfg.batch_size):
            results = translator.translate_batch(
                [tokenizer.id_to_piece(ids[i]) for i in chunk],
                beam_size=cfg.beam_size,
                num_hypotheses=cfg.beam_size,
                return_scores=True,
                length_penalty=RAW_SCORES,
                max_decoding_length=limit,
                suppress_sequences=banned,
                max_input_length=MAX_POSITIONS,
            )
            for i, r in zip(chunk, results, strict=True):
                ranked = gnmt_ranked(r.hypotheses, r.scores, cfg.length_penalty)
                outputs[i] = [([piece_id[p] for p in pieces], score) for pieces, score in ranked]
    return outputs


def ct2_translate(translator, tokenizer: Tokenizer, sentences: list[str], cfg: SearchConfig) -> list[str]:
    """Translate raw sentences with a CTranslate2 model (a `Translator` or its directory): the best
    of `ct2_hypotheses` per sentence, detokenised, in input order ("" for a blank input)."""
    if isinstance(translator, str | Path):
        translator = load_ct2(translator)
    ranked = ct2_hypotheses(translator, tokenizer, sentences, cfg)
    return [tokenizer.decode(hyps[0][0]) if hyps else "" for hyps in ranked]


# CTranslate2 divides a finished hypothesis' log-prob by len ** length_penalty, and with 0 it stops
# as its top beam finishes: this tiny exponent keeps the full search and (nearly) raw scores.
RAW_SCORES = 1e-6


def gnmt_ranked(
    hypotheses: list[list[str]], scores: list[float], alpha: float
) -> list[tuple[list[str], float]]:
    """CTranslate2's hypotheses re-scored with our GNMT penalty, best first (ties: CTranslate2's order).

    Each is (pieces, eos excluded) with its log-prob, `len ** RAW_SCORES` undone and divided by our GNMT
    penalty ((5 + |Y|) / 6) ** alpha, |Y| counting eos (`pipeline.model.beam.gnmt_length_penalty`)."""

    def normalised(pieces: list[str], score: float) -> float:
        return score * max(len(pieces), 1) ** RAW_SCORES / gnmt_length_penalty(len(pieces) + 1, alpha)

    ranked = [(pieces, normalised(pieces, score)) for pieces, score in zip(hypotheses, scores, strict=True)]
    return sorted(ranked, key=lambda pair: -pair[1])


@dataclass
class Ct2Engine:
    """A CTranslate2 export (a `ctranslate2.Translator`) and the tokenizer of its model, as an `Engine`."""

    translator: object
    tokenizer: Tokenizer
    device: str = "cpu"

    def translate(self, texts: list[str], cfg: SearchConfig, progress: bool = False) -> list[str]:
        return ct2_translate(self.translator, self.tokenizer, texts, cfg)

    def n_best(self, texts: list[str], cfg: SearchConfig, n: int) -> list[list[tuple[str, float]]]:
        check_n_best(n, cfg.beam_size)
        ranked = ct2_hypotheses(self.translator, self.tokenizer, texts, cfg)
        return [[(self.tokenizer.decode(ids), score) for ids, score in hyps[:n]] for hyps in ranked]


def vocabulary_size(model_dir: str | Path) -> int:
    """Pieces in an exported model's shared vocabulary.

    Raises:
        CheckpointError: `model_dir` holds no CTranslate2 vocabulary (not an export).
    """
    for name in ("shared_vocabulary.json", "shared_vocabulary.txt"):
        path = Path(model_dir) / name
        if path.is_file():
            text = path.read_text(encoding="utf-8")
            return len(json.loads(text)) if name.endswith(".json") else len(text.splitlines())
    raise CheckpointError(f"{model_dir}: not a CTranslate2 model (no shared_vocabulary file)")
