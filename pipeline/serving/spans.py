"""Protected spans: the parts of an English sentence the model must not translate (numbers with what
is typed around them, URLs, e-mail addresses, markup, names, characters the tokenizer cannot
represent), and where they are (docs/input-processing.md, "Protected spans").
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass

from pipeline.data.languages import TARGETS, Language
from pipeline.data.placeholders import PLACEHOLDER_RE
from pipeline.data.tokenizer import WORD_RE

URL = r"(?i:https?://|www\.)[^\s\]]+?(?=[.,;:!?)\"']*(?:\s|$|\]))"  # ends before a Markdown "]("
EMAIL = r"(?<![\w.+-])[\w.+-]++@[\w-]+(?:\.[\w-]+)+"  # possessive, anchored: linear time
PHONE = r"(?:\+\d{1,3}|\(\d{2,5}\))(?:[ -]?\d{2,})+"  # +49 30 1234567, (555) 123-4567
ORDINAL = r"(?i:\d+(?:st|nd|rd|th))\b"  # 3rd: written the target language's way (`Language.ordinal`)
# a number with what people type around it: a sign, a currency, a percent, dates 12/05/2023 and
# 2023-05-12, ranges 5-10; the sign only where no word or number is glued to its left
FORMATTED = r"(?:(?<![\w.,)])[-−+])?(?:[$€£¥]\s?)?\d+(?:[.,:/-]\d+)*(?:\s?[%€$£¥])?"
MARKUP_TOKEN = r"</?[A-Za-z][^<>]*>|\*\*|__|\]\([^)\s]+\)"  # tags, **, __, a Markdown link's "](url)"
MARKUP = MARKUP_TOKEN + r"|\[(?=[^\[\]]*\]\()"  # ... and its "[" (only before a "](")
SPAN_RE = re.compile("|".join([URL, EMAIL, MARKUP, PHONE, ORDINAL, FORMATTED, PLACEHOLDER_RE.pattern]))
MARKUP_RE = re.compile(MARKUP_TOKEN + r"|\[")
ORDINAL_RE = re.compile(r"(?i)(\d+)(?:st|nd|rd|th)")
PAIRED_MARKUP = ("**", "__")  # the same mark opens and closes

Representable = Callable[[str], bool]  # whether the tokenizer can represent a character
NameRule = Callable[[str], bool]  # whether a capitalised word is a name to copy verbatim


@dataclass(frozen=True)
class Span:
    """One protected span: `text` at `start`..`end` of its sentence, written `output` in the
    translation. Markup glued to a word in the source (`<b>big`) is glued to the neighbouring
    word of the translation too: `glue_next` to the next one, `glue_prev` to the previous one."""

    start: int
    end: int
    text: str
    output: str
    glue_prev: bool = False
    glue_next: bool = False


def foreign(ch: str) -> bool:
    """Whether `ch` is a letter of a non-Latin script or a symbol such as an emoji (Unicode
    categories So, Cn, Co): text the model cannot translate even when the tokenizer saw it."""
    if unicodedata.category(ch) in ("So", "Cn", "Co"):
        return True
    return ch.isalpha() and not unicodedata.name(ch, "").startswith("LATIN")


def find_spans(
    text: str,
    representable: Representable | None = None,
    is_name: NameRule | None = None,
    target_language: Language = TARGETS["de"],
) -> list[Span]:
    """Every protected span of `text`, in order (there may be more than there are placeholders).

    The spans are: the pattern spans (numbers, URLs, e-mails, markup, literal placeholders), given
    `representable(char)` the runs of characters it rejects, given `is_name(word)` the names. An
    ordinal's output is written the way of `target_language` (`Language.ordinal_form`)."""
    found = [m.span() for m in SPAN_RE.finditer(text)]
    if representable is not None:
        found += _unrepresentable_runs(text, representable, found)
    if is_name is not None:
        found += _names(text, is_name, found)
    write_ordinal = target_language.ordinal_form
    spans, opened = [], set()
    for start, end in sorted(found):
        spans.append(_span(text, start, end, _output(text[start:end], write_ordinal), opened))
    return spans


def _output(span: str, write_ordinal: Callable[[str], str]) -> str:
    """How `span` is written in the translation: an English ordinal the target's way, else verbatim."""
    ordinal = ORDINAL_RE.fullmatch(span)
    return write_ordinal(ordinal.group(1)) if ordinal else span


def _span(text: str, start: int, end: int, output: str, opened: set[str]) -> Span:
    """The span `text[start:end]`, glued to the word it touches when it is markup; `opened` holds
    the `**`/`__` now open, updated."""
    span = text[start:end]
    if not MARKUP_RE.fullmatch(span):
        return Span(start, end, span, output)
    opens = span not in opened if span in PAIRED_MARKUP else not span.startswith(("</", "]"))
    if span in PAIRED_MARKUP:
        opened ^= {span}
    glue_next = opens and bool(text[end : end + 1].strip())
    glue_prev = not opens and bool(text[start - 1 : start].strip())
    return Span(start, end, span, output, glue_prev, glue_next)


def _unrepresentable_runs(
    text: str, representable: Representable, taken: list[tuple[int, int]]
) -> list[tuple[int, int]]:
    """(start, end) of each run of characters `representable` rejects, outside `taken`; runs
    separated by whitespace only are merged (`東京 ☕` is one span)."""
    inside = {i for a, b in taken for i in range(a, b)}
    runs: list[list[int]] = []
    for i, ch in enumerate(text):
        if ch.isspace() or i in inside or representable(ch):
            continue
        if runs and not text[runs[-1][1] : i].strip():
            runs[-1][1] = i + 1
        else:
            runs.append([i, i + 1])
    return [(a, b) for a, b in runs]


def _names(text: str, is_name: NameRule, taken: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """(start, end) of each word outside `taken` that starts upper case, is not all capitals, and
    that `is_name` accepts."""
    inside = {i for a, b in taken for i in range(a, b)}
    return [
        m.span()
        for m in WORD_RE.finditer(text)
        if m.group()[0].isupper()
        and not m.group().isupper()
        and is_name(m.group())
        and not inside.intersection(range(*m.span()))
    ]
