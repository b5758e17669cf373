"""One model loader and one translate pipeline for raw English lines, shared by the decode stage,
`mt-translate`, the report and the MLflow pyfunc.

`load_translator` and `load_ct2_translator` give an `Engine`; `translate_lines` splits, protects,
case-normalises and chunks each line (docs/input-processing.md), translates all of them in one
batch and puts lines, case and spans back: one output line per input line.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from pipeline.core.config import SearchConfig
from pipeline.core.errors import CheckpointError
from pipeline.core.params_file import default_params
from pipeline.data.languages import target
from pipeline.data.placeholders import PLACEHOLDERS
from pipeline.data.tokenizer import Tokenizer
from pipeline.model.ensemble import Ensemble
from pipeline.model.transformer import Transformer
from pipeline.serving.casing import CaseForm, case_form, normalise_case, restore_case
from pipeline.serving.ct2 import Ct2Engine, load_ct2, vocabulary_size
from pipeline.serving.engine import Engine
from pipeline.serving.protection import missing_placeholders, protect, restore, translatable
from pipeline.serving.repeats import collapse_punctuation, collapse_repeats
from pipeline.serving.sentences import (
    Part,
    clean,
    split_at_long_words,
    split_between_spans,
    split_long,
    split_sentences,
)
from pipeline.serving.source_check import checked
from pipeline.serving.spans import NameRule, Representable, Span, find_spans, foreign
from pipeline.serving.torch_engine import TorchEngine
from pipeline.training.checkpoint import load_model


def max_src_pieces() -> int:
    """The source pieces a model saw at most (eos included): params.yaml's `train.max_len`, read when
    first asked for (not at import, so that a bad params.yaml is the caller's one-line error).

    Raises:
        ConfigError: the shipped params.yaml is invalid.
    """
    return default_params().train.max_len


def load_translator(
    checkpoint: str | Path,
    spm_model: str | Path,
    device: str | torch.device = "cpu",
    ensemble: Sequence[str | Path] = (),
) -> TorchEngine:
    """Our engine: the checkpoint's model (eval mode, on `device`) and the SentencePiece model.

    The two are checked against each other: same vocabulary size and pad/bos/eos ids. With `ensemble`,
    those checkpoints (checked the same way) decode together with it (`pipeline.model.ensemble`).

    Raises:
        CheckpointError: unreadable files (see `pipeline.training.checkpoint.load_model`,
            `Tokenizer.load`), or a vocabulary / special-id mismatch.
    """
    tok = Tokenizer.load(spm_model)
    models = [_checked_model(path, spm_model, tok) for path in [checkpoint, *ensemble]]
    return TorchEngine(models[0] if len(models) == 1 else Ensemble(models), tok, str(device))


def _checked_model(checkpoint: str | Path, spm_model: str | Path, tok: Tokenizer) -> Transformer:
    """The checkpoint's model, checked against the tokenizer (see `load_translator`)."""
    model, state = load_model(checkpoint, vocab_size=tok.vocab_size, spm_model=spm_model)
    ids = (state["pad_id"], state["bos_id"], state["eos_id"])
    if ids != (tok.pad_id, tok.bos_id, tok.eos_id):
        raise CheckpointError(
            f"{checkpoint}: special ids pad/bos/eos {ids} differ from the tokenizer's "
            f"{(tok.pad_id, tok.bos_id, tok.eos_id)}"
        )
    return model


def load_ct2_translator(
    model_dir: str | Path, spm_model: str | Path, compute_type: str = "default", device: str = "cpu"
) -> Ct2Engine:
    """The CTranslate2 engine: an export (`python -m pipeline.ops.export ctranslate2`) on `device`
    with its tokenizer; `compute_type` "float32", "int8", ... (CTranslate2's names).

    Raises:
        CheckpointError: the directory is not a CTranslate2 model of this tokenizer's vocabulary.
    """
    tok = Tokenizer.load(spm_model)
    size = vocabulary_size(model_dir)
    if size != tok.vocab_size:
        raise CheckpointError(
            f"{model_dir}: CTranslate2 vocabulary of {size} pieces, tokenizer has {tok.vocab_size}"
        )
    return Ct2Engine(load_ct2(model_dir, compute_type, device=device), tok, device)


@dataclass
class Sentence:
    """One sentence (or part of one) of an input line: its text, its protected spans, its case and
    model inputs."""

    line: int
    text: str
    spans: tuple[Span, ...]
    form: CaseForm
    inputs: list[str]  # [] = nothing translatable: the sentence comes back unchanged
    continues: bool = False  # a further part of a sentence with more spans than placeholders
    spaced: bool = True  # a space separates it from the part before (when it `continues`)


def _representable(tok: Tokenizer) -> Representable:
    @functools.cache
    def check(ch: str) -> bool:
        return not foreign(ch) and tok.unk_id not in tok.encode(ch)

    return check


def unseen_name(tok: Tokenizer) -> NameRule | None:
    """The name rule: a capitalised word the English training data never had (in any case) is a
    name, copied verbatim (`tok.source_words`; None, no rule, without that list)."""
    if tok.source_words is None:
        return None
    words = tok.source_words
    return lambda word: word.lower() not in words


def prepare(
    lines: list[str], tok: Tokenizer, max_pieces: int | None = None, *, tgt_lang: str = "de"
) -> list[Sentence]:
    """Split, protect, case-normalise and chunk every line's sentences (see module docstring) to
    `max_pieces` (None: `max_src_pieces()`); `tgt_lang` says how protected ordinals are written.

    Raises:
        KeyError: `tgt_lang` is not a target language.
        ConfigError: `max_pieces` is None and the shipped params.yaml is invalid.
    """
    language, representable, is_name = target(tgt_lang), _representable(tok), unseen_name(tok)
    limit = max(1, (max_pieces or max_src_pieces()) - 1)  # eos takes one position

    def count(word: str) -> int:
        return len(tok.encode(word))

    sentences = []
    for number, line in enumerate(lines):
        for text in split_sentences(checked(number, clean(line))):
            for k, (segment, long_word) in enumerate(split_at_long_words(text, count, limit)):
                if long_word:
                    sentences.append(_long_word(number, segment, continues=k > 0, limit=limit))
                    continue
                found = find_spans(segment, representable, is_name, language)
                for part in split_between_spans(segment, found, len(PLACEHOLDERS)):
                    part = dataclasses.replace(part, continues=part.continues or k > 0)
                    sentences.append(_prepare_part(number, part, count, limit))
    return sentences


def _long_word(number: int, word: str, *, continues: bool, limit: int) -> Sentence:
    """The `Sentence` of a word of line `number` longer than `limit` pieces: copied, not translated."""
    print(
        f"warning: line {number + 1}: a word of {len(word)} characters (over {limit} pieces) "
        "is copied untranslated",
        file=sys.stderr,
    )
    return Sentence(number, word, (), "as_is", [], continues)


def _prepare_part(number: int, part: Part, count: Callable[[str], int], limit: int) -> Sentence:
    """The `Sentence` of one part of line `number`: protected, case-normalised, chunked to `limit` pieces."""
    protected = protect(part.text, part.spans)
    if not translatable(protected):
        return Sentence(number, part.text, part.spans, "as_is", [], part.continues, part.spaced)
    form = case_form(protected)
    inputs = split_long(normalise_case(protected, form), count, limit)
    if len(inputs) > 1:
        print(
            f"warning: line {number + 1}: a sentence longer than {limit} pieces is translated "
            f"in {len(inputs)} parts",
            file=sys.stderr,
        )
    return Sentence(number, part.text, part.spans, form, inputs, part.continues, part.spaced)


def finish(sentence: Sentence, outputs: list[str]) -> str:
    """One sentence's translation from its chunks' outputs: joined, repeats collapsed, case and spans
    restored (an untranslatable sentence is returned unchanged)."""
    if not sentence.inputs:
        return sentence.text
    output = collapse_repeats(" ".join(o for o in outputs if o))
    output = collapse_punctuation(output, sentence.text)
    return restore(restore_case(output, sentence.form), sentence.spans)


def _by_line(sentences: list[Sentence], texts: list[str], n_lines: int) -> list[list[str]]:
    """Each line's sentence translations, `texts[i]` being `sentences[i]`'s; the parts of a sentence
    joined into one."""
    per_line: list[list[str]] = [[] for _ in range(n_lines)]
    for s, text in zip(sentences, texts, strict=True):
        done = per_line[s.line]
        if s.continues:
            done[-1] += (" " if s.spaced else "") + text
        else:
            done.append(text)
    return per_line


def translate_sentences(
    engine: Engine,
    lines: list[str],
    cfg: SearchConfig,
    *,
    progress: bool = False,
    max_pieces: int | None = None,
    tgt_lang: str = "de",
) -> list[list[str]]:
    """Each line's translated sentences: a list per line, [] for a blank line.

    All model inputs are decoded in one `engine.translate` call; `tgt_lang` says how protected ordinals
    are written. Dropped placeholders are counted in one stderr warning.

    Raises:
        KeyError: `tgt_lang` is not a target language.
    """
    sentences = prepare(lines, engine.tokenizer, max_pieces, tgt_lang=tgt_lang)
    flat = [text for s in sentences for text in s.inputs]
    outputs = iter(engine.translate(flat, cfg, progress))
    texts, missing = [], 0
    for s in sentences:
        mine = [next(outputs) for _ in s.inputs]
        missing += missing_placeholders(" ".join(mine), len(s.spans)) if s.inputs else 0
        texts.append(finish(s, mine))
    if missing:
        print(f"warning: {missing} protected span(s) dropped by the model were appended", file=sys.stderr)
    return _by_line(sentences, texts, len(lines))


def translate_lines(
    engine: Engine,
    lines: list[str],
    cfg: SearchConfig,
    *,
    progress: bool = False,
    max_pieces: int | None = None,
    tgt_lang: str = "de",
) -> list[str]:
    """One translated line per input line (sentences re-joined with a space; blank -> "");
    `tgt_lang` says how protected ordinals are written.

    Raises:
        KeyError: `tgt_lang` is not a target language.
    """
    per_line = translate_sentences(
        engine, lines, cfg, progress=progress, max_pieces=max_pieces, tgt_lang=tgt_lang
    )
    return [" ".join(sentences) for sentences in per_line]


def translate_lines_n_best(
    engine: Engine,
    lines: list[str],
    cfg: SearchConfig,
    n_best: int,
    *,
    max_pieces: int | None = None,
    tgt_lang: str = "de",
) -> list[list[tuple[str, float]]]:
    """The `n_best` best translated lines of each input line, best first.

    Each is (text, length-normalised log-prob), with the same processing as `translate_lines`: exactly
    `n_best` entries per line. The k-th entry joins the k-th best of each of the line's model inputs
    (sentences, chunks); its score is their mean. A line with nothing to translate (blank, or only
    numbers, links, emoji) has `n_best` copies of its only output (the line itself, score 0.0); an engine
    that returns fewer hypotheses than asked for has its last one repeated.

    Raises:
        ValueError: `n_best` outside 1..cfg.beam_size.
        KeyError: `tgt_lang` is not a target language.
    """
    sentences = prepare(lines, engine.tokenizer, max_pieces, tgt_lang=tgt_lang)
    flat = [text for s in sentences for text in s.inputs]
    results = iter(engine.n_best(flat, cfg, n_best))
    per_line: list[list[tuple[Sentence, list[list[tuple[str, float]]]]]] = [[] for _ in lines]
    for s in sentences:
        per_line[s.line].append((s, [next(results) for _ in s.inputs]))
    out = []
    for parts in per_line:
        if not any(s.inputs for s, _ in parts):
            out.append([(_line_text([(s, finish(s, [])) for s, _ in parts]), 0.0)] * n_best)
            continue
        entries = []
        for k in range(n_best):
            kth = [(s, [r[min(k, len(r) - 1)] for r in chunks]) for s, chunks in parts]
            scores = [score for _, picked in kth for _, score in picked]
            text = _line_text([(s, finish(s, [text for text, _ in picked])) for s, picked in kth])
            entries.append((text, sum(scores) / len(scores)))
        out.append(entries)
    return out


def _line_text(done: list[tuple[Sentence, str]]) -> str:
    """One line's translation from its sentences' (and their parts') translations, in order."""
    return "".join(
        ("" if i == 0 or (s.continues and not s.spaced) else " ") + text for i, (s, text) in enumerate(done)
    )
