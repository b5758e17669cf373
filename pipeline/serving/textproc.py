"""Pre- and post-processing of real input around the model: sentences, protected spans, casing.

Every entry point that translates raw text (the decode stage, `mt-translate`, the MLflow pyfunc)
goes through `pipeline.serving.translator.translate_lines`, which uses the pieces here:

- **Sentences** (`split_sentences`): sentencex (Wikimedia's rule-based segmenter, linear time) splits
  a line into sentences, with URLs, e-mails and numbers masked first so their dots never end one;
  each is translated alone and the line re-joined with spaces.
  A sentence longer than the trained maximum is cut into word chunks (`split_long`), preferring a
  cut after `,;:`.
- **Protected spans** (`protect` / `restore`): numbers (digits, times such as 5:30, decimals), URLs,
  e-mail addresses and runs of characters the SentencePiece model cannot represent or that are
  `foreign` (other scripts, emoji) are replaced by the placeholders `PLACEHOLDERS` (SentencePiece user-defined symbols: one
  piece each, untouched by its NFKC normalisation) and put back verbatim after translation. A
  placeholder the model dropped gets its span appended, so nothing is lost. `pipeline.data.placeholders.protect_pair`
  puts the same placeholders into training pairs so the model learns to copy them.
- **Casing** (`case_form`, `normalise_case`, `restore_case`): ALL-CAPS and Title-Case input is
  translated sentence-cased; ALL-CAPS output is upper-cased again.
- **Repeats** (`collapse_repeats`): no token is repeated more than `MAX_RUN` times in a row.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from typing import Literal

import sentencex

from pipeline.data.placeholders import NUMBER, PLACEHOLDER_RE, PLACEHOLDERS

MAX_RUN = 3  # at most this many identical tokens in a row in an output

URL = r"(?i:https?://|www\.)\S+?(?=[.,;:!?)\]\"']*(?:\s|$))"
EMAIL = r"(?<![\w.+-])[\w.+-]++@[\w-]+(?:\.[\w-]+)+"  # possessive, anchored: linear time
SPAN_RE = re.compile(f"{URL}|{EMAIL}|{NUMBER}")
MASK_RE = re.compile("\ue000(\\d+)\ue001")  # a masked span while splitting sentences
LETTER_RE = re.compile(r"[^\W\d_]")

CaseForm = Literal["upper", "title", "as_is"]
Representable = Callable[[str], bool]


# --------------------------------------------------------------------------- sentences


def split_sentences(line: str) -> list[str]:
    """The sentences of one line (sentencex, English rules), stripped; [] for a blank line. URLs,
    e-mail addresses and numbers are masked while splitting, so their dots and `?` never end a
    sentence. Linear in the line's length."""
    if not line.strip():
        return []
    spans: list[str] = []

    def mask(match: re.Match) -> str:
        spans.append(match.group())
        return f"\ue000{len(spans) - 1}\ue001"

    masked = SPAN_RE.sub(mask, line)
    sentences = [s.strip() for s in sentencex.segment("en", masked) if s.strip()]
    return [MASK_RE.sub(lambda m: spans[int(m.group(1))], s) for s in sentences]


def split_long(text: str, count: Callable[[str], int], limit: int) -> list[str]:
    """`text` cut at spaces into chunks of at most `limit` pieces (`count(word)` pieces per word),
    preferring a cut after a word ending in `,;:` in the chunk's second half. A single word longer
    than `limit` stays one chunk. Returns `[text]` when it fits."""
    words = text.split()
    sizes = [count(w) for w in words]
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


# --------------------------------------------------------------------------- protected spans


def _unrepresentable_runs(text: str, representable: Representable, taken: list[tuple[int, int]]):
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


def foreign(ch: str) -> bool:
    """Whether `ch` is a letter of a non-Latin script or a symbol such as an emoji (Unicode
    categories So, Cn, Co): text the EN→DE model cannot translate even when the tokenizer saw it."""
    if unicodedata.category(ch) in ("So", "Cn", "Co"):
        return True
    return ch.isalpha() and not unicodedata.name(ch, "").startswith("LATIN")


def protect(text: str, representable: Representable | None = None) -> tuple[str, list[str]]:
    """Replace numbers, URLs, e-mails (and, given `representable(char)`, runs of characters the
    tokenizer cannot represent) by `PLACEHOLDERS` in order of appearance; returns the new text and
    the replaced spans (span i is behind `PLACEHOLDERS[i]`). Spans beyond the ninth stay in place."""
    found = [m.span() for m in SPAN_RE.finditer(text)]
    if representable is not None:
        found += _unrepresentable_runs(text, representable, found)
    found = sorted(found)[: len(PLACEHOLDERS)]
    out, spans, last = [], [], 0
    for start, end in found:
        out += [text[last:start], PLACEHOLDERS[len(spans)]]
        spans.append(text[start:end])
        last = end
    return "".join(out) + text[last:], spans


def missing_placeholders(text: str, n_spans: int) -> int:
    """How many of the first `n_spans` placeholders `text` lacks."""
    return sum(PLACEHOLDERS[i] not in text for i in range(n_spans))


def restore(text: str, spans: list[str]) -> str:
    """Put `spans` back in place of their placeholders (the first occurrence; repeats and unknown
    placeholders are dropped); a span whose placeholder is missing is appended, so none is lost."""
    tail = []
    for i, span in enumerate(spans):
        mark = PLACEHOLDERS[i]
        if mark in text:
            head, rest = text.split(mark, 1)
            text = head + span + re.sub(f" ?{mark}", "", rest)
        else:
            tail.append(span)
    text = re.sub(f" ?{PLACEHOLDER_RE.pattern}", "", text)
    text = re.sub(r" {2,}", " ", " ".join([text.strip(), *tail])).strip()
    return text


def translatable(text: str) -> bool:
    """Whether `text` (with placeholders) holds any letter outside the placeholders."""
    return bool(LETTER_RE.search(PLACEHOLDER_RE.sub("", text)))


# --------------------------------------------------------------------------- casing and repeats


def case_form(text: str) -> CaseForm:
    """ "upper" when every cased letter is upper case (at least two letters), "title" when at least
    three words and every word starts upper case, else "as_is"."""
    letters = [c for c in text if c.isalpha() and c.lower() != c.upper()]
    if len(letters) >= 2 and all(c.isupper() for c in letters):
        return "upper"
    words = [w for w in re.findall(r"[^\W\d_]+", text)]
    if len(words) >= 3 and all(w[0].isupper() for w in words):
        return "title"
    return "as_is"


def normalise_case(text: str, form: CaseForm) -> str:
    """Sentence case for "upper"/"title" input (lower case, first letter upper); else `text`."""
    if form == "as_is":
        return text
    lower = text.lower()
    first = LETTER_RE.search(lower)
    return lower if first is None else lower[: first.start()] + first.group().upper() + lower[first.end() :]


def restore_case(text: str, form: CaseForm) -> str:
    """The output in the input's case: upper-cased for "upper" input; German headlines are sentence
    case with capitalised nouns, which the model already writes, so "title" output is kept."""
    return text.upper() if form == "upper" else text


def collapse_repeats(text: str, max_run: int = MAX_RUN) -> str:
    """Drop the repetitions of a whitespace token beyond `max_run` in a row (a degenerate
    decoding loop such as `ist ist ist ist ist`)."""
    out: list[str] = []
    for token in text.split(" "):
        if len(out) >= max_run and all(t == token for t in out[-max_run:]):
            continue
        out.append(token)
    return " ".join(out)
