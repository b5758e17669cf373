"""Protected spans (`pipeline.serving.spans`) replaced by placeholders ｟1｠..｟9｠ before translation
and put back after it; a placeholder the model dropped gets its span appended, so nothing is lost
(docs/input-processing.md, "Protected spans").
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from pipeline.data.placeholders import PLACEHOLDER_RE, PLACEHOLDERS
from pipeline.serving.spans import Span

# a placeholder in a model output, with the space before it; its number read whole (｟12｠ is not ｟1｠)
OUTPUT_MARK_RE = re.compile(" ?\uff5f([1-9][0-9]*)\uff60")
LETTER_RE = re.compile(r"[^\W\d_]")


def protect(text: str, spans: Sequence[Span]) -> str:
    """`text` with `spans[i]` (in order, positions in `text`) replaced by `PLACEHOLDERS[i]`.

    Markup glued to a word is given to the model as a word of its own (`<b>big</b>` -> `｟1｠ big ｟2｠`,
    as the model saw placeholders in training) and glued back by `restore`.

    Raises:
        ValueError: more spans than placeholders (cut the text first), or spans out of order.
    """
    if len(spans) > len(PLACEHOLDERS):
        raise ValueError(f"{len(spans)} spans but only {len(PLACEHOLDERS)} placeholders: cut the text first")
    out, last = [], 0
    for mark, span in zip(PLACEHOLDERS, spans, strict=False):
        if span.start < last:
            raise ValueError(f"span {span.text!r} at {span.start} overlaps or precedes the one before it")
        before, after = " " if span.glue_prev else "", " " if span.glue_next else ""
        out += [text[last : span.start], before, mark, after]
        last = span.end
    return "".join(out) + text[last:]


def translatable(text: str) -> bool:
    """Whether `text` (with placeholders) holds any letter outside the placeholders."""
    return bool(LETTER_RE.search(PLACEHOLDER_RE.sub("", text)))


def missing_placeholders(text: str, n_spans: int) -> int:
    """How many of the first `n_spans` placeholders `text` lacks."""
    return sum(PLACEHOLDERS[i] not in text for i in range(n_spans))


def restore(text: str, spans: Sequence[Span]) -> str:
    """The model output `text` with each span's output in place of its placeholder.

    The first occurrence of each placeholder is used; repeats and unknown placeholders are dropped with
    the space before them; a span whose placeholder is missing is appended, so none is lost. Spaces are
    collapsed, glued markup is joined to its word, and an ordinal written with a dot (`3.`) followed by
    the sentence's `.` gives one dot. One pass: a span that looks like a placeholder stays verbatim."""
    pieces: list[str | Span] = []
    used: set[int] = set()
    last = 0
    for match in OUTPUT_MARK_RE.finditer(text):
        pieces.append(text[last : match.start()])
        i = int(match.group(1)) - 1
        if i < len(spans) and i not in used:
            used.add(i)
            pieces += [match.group()[: match.start(1) - match.start() - 1], spans[i]]
        last = match.end()
    pieces.append(text[last:])
    _strip_end(pieces, None)
    pieces += [p for i, span in enumerate(spans) if i not in used for p in (" ", span)]
    return _render(pieces)


def _render(pieces: list[str | Span]) -> str:
    """The text of `pieces` (text and restored spans, in order) with glue applied and spaces collapsed."""
    out: list[str] = []
    glue_next = False
    for k, piece in enumerate(pieces):
        if isinstance(piece, str):
            out.append(piece.lstrip(" ") if glue_next else piece)
            glue_next = glue_next and not piece.strip(" ")
            continue
        if piece.glue_prev:
            _strip_end(out, " ")
        after = pieces[k + 1] if k + 1 < len(pieces) else ""
        out.append(_output(piece, after if isinstance(after, str) else ""))
        glue_next = piece.glue_next
    return re.sub(r" {2,}", " ", "".join(out)).strip()


def _output(span: Span, after: str) -> str:
    """`span.output`, less its final dot when it is an ordinal such as `3.` and `after` (the text
    right after it) starts with a single dot."""
    if re.fullmatch(r"\d+\.", span.output) and re.match(r"\.(?!\.)", after):
        return span.output[:-1]
    return span.output


def _strip_end(pieces: list[str | Span] | list[str], chars: str | None) -> None:
    """Strip `chars` (None: whitespace) from the end of the text pieces at the end of `pieces`."""
    while pieces and isinstance(pieces[-1], str) and not pieces[-1].strip(chars):
        pieces.pop()
    if pieces and isinstance(pieces[-1], str):
        pieces[-1] = pieces[-1].rstrip(chars)
