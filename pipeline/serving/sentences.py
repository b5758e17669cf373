"""A raw input line into the texts the model translates: cleaned, split into sentences by sentencex
(with protected spans masked, so their dots never end a sentence), a word longer than the model's
input set apart to be copied, a sentence with more spans than placeholders cut into parts, an
over-long one into chunks (docs/input-processing.md).
"""

from __future__ import annotations

import dataclasses
import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import sentencex

from pipeline.data.placeholders import PLACEHOLDERS
from pipeline.serving.spans import Span, find_spans

# what sentencex reads in place of a span: a word with a digit and no letter, which it takes for
# neither an abbreviation nor a sentence end (a bare `0` before a dot would read as a list number)
SENTENCE_MASK = "#0#"
CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f]")
PLACEHOLDER_OPEN = PLACEHOLDERS[0][0]  # each placeholder starts with it (`｟`)


@dataclass(frozen=True)
class Part:
    """A sentence, or a part of one, with at most as many protected spans as placeholders."""

    text: str
    spans: tuple[Span, ...]  # positions in `text`
    continues: bool = False  # a further part of the sentence before
    spaced: bool = True  # a space separates it from the part before (when it `continues`)


def clean(line: str) -> str:
    """`line` in Unicode NFC (a combining accent joins its letter: NFD `café` becomes `café`), with
    control characters (NUL, escape, ...) removed and tabs as spaces."""
    line = unicodedata.normalize("NFC", line).replace("\t", " ")
    return CONTROL_RE.sub("", line)


def split_sentences(line: str) -> list[str]:
    """The sentences of one line (sentencex, English rules), stripped; [] for a blank line.

    URLs, e-mail addresses, numbers and markup are masked while splitting, so their dots and `?` never
    end a sentence. Linear in the line's length."""
    if not line.strip():
        return []
    masked, origin = _masked(line)
    bounds = sentencex.get_sentence_boundaries("en", masked)
    sentences = (line[origin[b["start_index"]] : origin[b["end_index"]]].strip() for b in bounds)
    return [s for s in sentences if s]


def _masked(line: str) -> tuple[str, list[int]]:
    """`line` with each pattern span replaced by `SENTENCE_MASK`, and for each position of that
    copy (and its end) the position in `line` it comes from (a mask's: its span's start)."""
    pieces, origin, last = [], [], 0
    for span in find_spans(line):
        pieces += [line[last : span.start], SENTENCE_MASK]
        origin += [*range(last, span.start), *[span.start] * len(SENTENCE_MASK)]
        last = span.end
    pieces.append(line[last:])
    origin += range(last, len(line) + 1)
    return "".join(pieces), origin


def split_at_long_words(text: str, count: Callable[[str], int], limit: int) -> list[tuple[str, bool]]:
    """`text` as (segment, is_long_word) pairs, in order, each over-long word a segment of its own.

    A word is over-long with more than `limit` pieces (`count(word)`; a base64 blob, 200,000 × `x`); the
    text between two such words is another segment (stripped; empty ones left out). No word is a
    language's word at that length, so a caller copies it instead of translating it. Returns
    `[(text, False)]` when no word is that long. Linear in `len(text)`: only words of at least `limit`
    characters are counted.

    Raises:
        ValueError: `limit` below 1.
    """
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    segments, last = [], 0
    for word in re.finditer(r"\S+", text):
        # a piece holds at least one character, plus one word-boundary piece at most
        if len(word[0]) + 1 <= limit or count(word[0]) <= limit:
            continue
        segments += [(text[last : word.start()].strip(), False), (word[0], True)]
        last = word.end()
    segments.append((text[last:].strip(), False))
    return [(segment, long) for segment, long in segments if segment]


def split_between_spans(text: str, spans: Sequence[Span], limit: int) -> list[Part]:
    """`text` cut into parts of at most `limit` of its `spans`, so that each can be protected on its own.

    `spans` are in order, positions in `text`. A part ends at the last space between its `limit`-th span
    and the next (the last after a `,;:` if any), else in the latest gap between two of its spans that has
    a space; where its spans touch without any space, right before the next span (a part that is not
    `spaced`). Returns one part, `text`, when it holds at most `limit`.

    Raises:
        ValueError: `limit` below 1.
    """
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    parts: list[Part] = []
    begin, first, spaced = 0, 0, True
    while len(spans) - first > limit:
        cut, nxt, space = _cut(text, spans, first, first + limit)
        parts.append(_part(text, begin, cut, spans[first:nxt], bool(parts), spaced))
        begin, first, spaced = cut, nxt, space
    parts.append(_part(text, begin, len(text), spans[first:], bool(parts), spaced))
    return parts


def _cut(text: str, spans: Sequence[Span], first: int, last: int) -> tuple[int, int, bool]:
    """Where the part from span `first` ends, holding spans `first`..`last - 1` or fewer: (the
    position, the next part's first span, whether the cut is at a space)."""
    for k in range(last, first, -1):
        gap_start = spans[k - 1].end
        gap = text[gap_start : spans[k].start]
        after_mark = list(re.finditer(r"(?<=[,;:])\s", gap))
        space = (after_mark or list(re.finditer(r"\s", gap)) or [None])[-1]  # the last such space
        if space is not None:
            return gap_start + space.start(), k, True
    return spans[last].start, last, False


def _part(text: str, begin: int, end: int, spans: Sequence[Span], continues: bool, spaced: bool) -> Part:
    """The part `text[begin:end]`, stripped, with `spans` moved to its positions."""
    raw = text[begin:end]
    shift = begin + len(raw) - len(raw.lstrip())
    moved = tuple(dataclasses.replace(s, start=s.start - shift, end=s.end - shift) for s in spans)
    return Part(raw.strip(), moved, continues, spaced)


def split_long(text: str, count: Callable[[str], int], limit: int) -> list[str]:
    """`text` cut at spaces into chunks of at most `limit` pieces (`count(word)` pieces per word).

    A cut after a word ending in `,;:` in the chunk's second half is preferred. A word of more than
    `limit` pieces is first cut into runs of characters that fit (`cut_word`), so no chunk is over
    `limit` whatever the input. Returns `[text]` when it fits.

    Raises:
        ValueError: `limit` below 1.
    """
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    words, sizes = [], []
    for word in text.split():
        size = count(word)
        if size <= limit:
            words.append(word)
            sizes.append(size)
        else:
            runs = cut_word(word, count, limit)
            words += runs
            sizes += [count(run) for run in runs]
    if sum(sizes) <= limit:
        return [text]
    chunks, start, total = [], 0, 0
    for i, size in enumerate(sizes):
        if total + size > limit and i > start:
            cut = next((j + 1 for j in range(i - 1, (start + i) // 2, -1) if words[j][-1] in ",;:"), i)
            chunks.append(" ".join(words[start:cut]))
            start, total = cut, sum(sizes[cut:i])
        total += size
    return [*chunks, " ".join(words[start:])]


def cut_word(word: str, count: Callable[[str], int], limit: int) -> list[str]:
    """`word` cut into runs of consecutive characters of at most `limit` pieces each (by `count`).

    Never inside a placeholder (`｟1｠`). A run is first `limit` characters, then shrinks in proportion
    to its excess pieces until it fits: a few `count` calls on at most `limit` characters per run, so
    linear in `len(word)`. A character that alone is over `limit` pieces is a run of its own.

    Raises:
        ValueError: `limit` below 1.
    """
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    runs, start = [], 0
    while start < len(word):
        end = min(len(word), start + limit)
        while end - start > 1 and (size := count(word[start:end])) > limit:
            end = start + max(1, (end - start) * limit // size)
        end = _outside_placeholder(word, start, end)
        runs.append(word[start:end])
        start = end
    return runs


def _outside_placeholder(word: str, start: int, end: int) -> int:
    """`end`, or where the placeholder that a cut at `end` would open starts (when after `start`)."""
    opening = word.rfind(PLACEHOLDER_OPEN, max(start + 1, end - len(PLACEHOLDERS[0]) + 1), end)
    return end if opening < 0 else opening
