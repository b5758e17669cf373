"""One model loader and one translate pipeline for raw English lines, shared by the decode stage,
`mt-translate`, the report and the MLflow pyfunc.

`load_translator` gives our engine (a checkpoint checked against the tokenizer: vocabulary size
and special ids), `load_ct2_translator` the CTranslate2 engine; both are `pipeline.serving.engine.Engine`s,
chosen once. `translate_lines` takes raw lines: each is split into sentences, protected spans
become placeholders, ALL-CAPS / Title-Case sentences are sentence-cased, sentences longer than the
trained maximum are cut into chunks; all model inputs of all lines go to the engine together, then
case, spans and lines are restored (see `pipeline.serving.textproc`). One output line per input
line; an empty line stays empty.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from pipeline.core.config import DecodeConfig, TrainConfig
from pipeline.core.errors import CheckpointError
from pipeline.data.tokenizer import Tokenizer
from pipeline.serving import textproc
from pipeline.serving.ct2 import Ct2Engine, load_ct2, vocabulary_size
from pipeline.serving.engine import Engine
from pipeline.serving.ours import OursEngine
from pipeline.training.checkpoint import load_model

MAX_SRC_PIECES = TrainConfig().max_len  # source pieces the model saw at most (eos included)


def load_translator(
    checkpoint: str | Path, spm_model: str | Path, device: str | torch.device = "cpu"
) -> OursEngine:
    """Our engine: the checkpoint's model (eval mode, on `device`) and the SentencePiece model,
    checked against each other: same vocabulary size and pad/bos/eos ids.

    Raises:
        CheckpointError: unreadable files (see `pipeline.training.checkpoint.load_model`, `Tokenizer.load`),
            or a vocabulary / special-id mismatch.
    """
    tok = Tokenizer.load(spm_model)
    model, state = load_model(checkpoint, vocab_size=tok.vocab_size, spm_model=spm_model)
    ids = (state["pad_id"], state["bos_id"], state["eos_id"])
    if ids != (tok.pad_id, tok.bos_id, tok.eos_id):
        raise CheckpointError(
            f"{checkpoint}: special ids pad/bos/eos {ids} differ from the tokenizer's "
            f"{(tok.pad_id, tok.bos_id, tok.eos_id)}"
        )
    return OursEngine(model, tok, str(device))


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
    """One sentence of an input line: its text, its protected spans, its case and model inputs."""

    line: int
    text: str
    spans: list[str]
    form: textproc.CaseForm
    inputs: list[str]  # [] = nothing translatable: the sentence comes back unchanged
    continues: bool = False  # a further part of a sentence with more spans than placeholders


def _representable(tok: Tokenizer) -> textproc.Representable:
    @functools.cache
    def check(ch: str) -> bool:
        return not textproc.foreign(ch) and tok.unk_id not in tok.encode(ch)

    return check


def unseen_name(tok: Tokenizer) -> textproc.NameRule | None:
    """The name rule: a capitalised word the English training data never had (in any case) is a
    name, copied verbatim (`tok.source_words`; None, no rule, without that list)."""
    if tok.source_words is None:
        return None
    words = tok.source_words
    return lambda word: word.lower() not in words


def prepare(lines: list[str], tok: Tokenizer, max_pieces: int = MAX_SRC_PIECES) -> list[Sentence]:
    """Split, protect, case-normalise and chunk every line's sentences (see module docstring)."""
    representable, is_name = _representable(tok), unseen_name(tok)
    limit = max(1, max_pieces - 1)  # eos takes one position

    def count(word: str) -> int:
        return len(tok.encode(word))

    def find(text: str) -> list[tuple[int, int]]:
        return textproc.find_spans(text, representable, is_name)

    sentences = []
    for number, line in enumerate(lines):
        for text, continues in spans_grouped(textproc.split_sentences(textproc.clean(line)), find):
            protected, spans = textproc.protect(text, representable, is_name)
            if not textproc.translatable(protected):
                sentences.append(Sentence(number, text, spans, "as_is", [], continues))
                continue
            form = textproc.case_form(protected)
            inputs = textproc.split_long(textproc.normalise_case(protected, form), count, limit)
            if len(inputs) > 1:
                print(
                    f"warning: line {number + 1}: a sentence longer than {limit} pieces is translated "
                    f"in {len(inputs)} pieces",
                    file=sys.stderr,
                )
            sentences.append(Sentence(number, text, spans, form, inputs, continues))
    return sentences


def spans_grouped(
    sentences: list[str], find: Callable[[str], list[tuple[int, int]]]
) -> list[tuple[str, bool]]:
    """(part, whether it continues the previous sentence) for `sentences`, each one that holds more
    protected spans (`find(sentence)`) than there are placeholders cut between spans into parts of
    at most `len(PLACEHOLDERS)`, each translated on its own, so no span is left to the model."""
    limit = len(textproc.PLACEHOLDERS)
    grouped = [textproc.split_between_spans(s, find(s), limit) for s in sentences]
    return [(part, i > 0) for parts in grouped for i, part in enumerate(parts)]


def finish(sentence: Sentence, outputs: list[str]) -> str:
    """One sentence's translation from its chunks' outputs: joined, repeats collapsed, case and spans
    restored (an untranslatable sentence is returned unchanged)."""
    if not sentence.inputs:
        return sentence.text
    german = textproc.collapse_repeats(" ".join(o for o in outputs if o))
    german = textproc.collapse_punctuation(german, sentence.text)
    return textproc.restore(textproc.restore_case(german, sentence.form), sentence.spans)


def translate_sentences(
    engine: Engine,
    lines: list[str],
    cfg: DecodeConfig,
    *,
    progress: bool = False,
    max_pieces: int = MAX_SRC_PIECES,
) -> list[list[str]]:
    """Each line's translated sentences (a list per line, [] for a blank line), all model inputs
    decoded in one `engine.translate` call. Dropped placeholders are counted in one stderr warning."""
    sentences = prepare(lines, engine.tokenizer, max_pieces)
    flat = [text for s in sentences for text in s.inputs]
    german = iter(engine.translate(flat, cfg, progress))
    per_line: list[list[str]] = [[] for _ in lines]
    missing = 0
    for s in sentences:
        outputs = [next(german) for _ in s.inputs]
        missing += textproc.missing_placeholders(" ".join(outputs), len(s.spans)) if s.inputs else 0
        done = per_line[s.line]
        text = finish(s, outputs)
        if s.continues:
            done[-1] = f"{done[-1]} {text}"
        else:
            done.append(text)
    if missing:
        print(f"warning: {missing} protected span(s) dropped by the model were appended", file=sys.stderr)
    return per_line


def translate_lines(
    engine: Engine,
    lines: list[str],
    cfg: DecodeConfig,
    *,
    progress: bool = False,
    max_pieces: int = MAX_SRC_PIECES,
) -> list[str]:
    """One translated line per input line (sentences re-joined with a space; blank -> "")."""
    per_line = translate_sentences(engine, lines, cfg, progress=progress, max_pieces=max_pieces)
    return [" ".join(sentences) for sentences in per_line]


def translate_lines_n_best(
    engine: Engine, lines: list[str], cfg: DecodeConfig, n_best: int, *, max_pieces: int = MAX_SRC_PIECES
) -> list[list[tuple[str, float]]]:
    """The `n_best` best translated lines of each input line as (text, length-normalised log-prob),
    best first, with the same processing as `translate_lines`: exactly `n_best` entries per line.
    The k-th entry joins the k-th best of each of the line's model inputs (sentences, chunks); its
    score is their mean. A line with nothing to translate (blank, or only numbers, links, emoji)
    has `n_best` copies of its only output (the line itself, score 0.0); an engine that returns
    fewer hypotheses than asked for has its last one repeated.

    Raises:
        ValueError: `n_best` outside 1..cfg.beam_size.
    """
    sentences = prepare(lines, engine.tokenizer, max_pieces)
    flat = [text for s in sentences for text in s.inputs]
    results = iter(engine.n_best(flat, cfg, n_best))
    per_line: list[list[tuple[Sentence, list[list[tuple[str, float]]]]]] = [[] for _ in lines]
    for s in sentences:
        per_line[s.line].append((s, [next(results) for _ in s.inputs]))
    out = []
    for parts in per_line:
        if not any(s.inputs for s, _ in parts):
            out.append([(" ".join(finish(s, []) for s, _ in parts), 0.0)] * n_best)
            continue
        entries = []
        for k in range(n_best):
            kth = [(s, [r[min(k, len(r) - 1)] for r in chunks]) for s, chunks in parts]
            scores = [score for _, picked in kth for _, score in picked]
            text = " ".join(finish(s, [text for text, _ in picked]) for s, picked in kth)
            entries.append((text, sum(scores) / len(scores)))
        out.append(entries)
    return out
