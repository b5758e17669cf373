"""Pre- and post-processing of real input around the model: sentences, protected spans, casing.

Every entry point that translates raw text (the decode stage, `mt-translate`, the MLflow pyfunc)
goes through `pipeline.serving.translator.translate_lines`, which uses the pieces here:

- **Sentences** (`split_sentences`): sentencex (Wikimedia's rule-based segmenter, linear time) splits
  a line into sentences, with URLs, e-mails and numbers masked first so their dots never end one;
  each is translated alone and the line re-joined with spaces.
  A sentence longer than the trained maximum is cut into word chunks (`split_long`), preferring a
  cut after `,;:`.
- **Input** (`clean`): Unicode NFC (a combining accent joins its letter), control characters
  removed.
- **Protected spans** (`protect` / `restore`): numbers with what is typed around them (signs,
  currencies, percent; dates such as 12/05/2023 and 2023-05-12, phone numbers, ranges; ordinals,
  written the German way: `3rd` -> `3.`), URLs, e-mail addresses, markup (HTML tags, `**`, `__`,
  the brackets and URL of a Markdown link, so the link text is translated), literal placeholders,
  names (capitalised words the English training data never had: `source_words.txt`), and runs of
  characters the SentencePiece model cannot represent or that are `foreign` (other
  scripts, emoji) are replaced by the placeholders `PLACEHOLDERS` (SentencePiece user-defined
  symbols: one piece each, untouched by its NFKC normalisation) and put back after translation.
  A placeholder the model dropped gets its span appended, so nothing is lost; a sentence with more
  spans than placeholders is translated in parts. `pipeline.data.placeholders.protect_pair` puts
  the same placeholders into training pairs so the model learns to copy them.
- **Casing** (`case_form`, `normalise_case`, `restore_case`): ALL-CAPS and Title-Case input is
  translated sentence-cased; ALL-CAPS output is upper-cased again.
- **Repeats** (`collapse_repeats`, `collapse_punctuation`): no token is repeated more than
  `MAX_RUN` times in a row, nor a punctuation mark the input does not repeat so.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from typing import Literal

import sentencex

from pipeline.data.placeholders import PLACEHOLDER_RE, PLACEHOLDERS
from pipeline.data.tokenizer import WORD_RE

MAX_RUN = 3  # at most this many identical tokens in a row in an output

URL = r"(?i:https?://|www\.)[^\s\]]+?(?=[.,;:!?)\"']*(?:\s|$|\]))"  # ends before a Markdown "]("
EMAIL = r"(?<![\w.+-])[\w.+-]++@[\w-]+(?:\.[\w-]+)+"  # possessive, anchored: linear time
PHONE = r"(?:\+\d{1,3}|\(\d{2,5}\))(?:[ -]?\d{2,})+"  # +49 30 1234567, (555) 123-4567
ORDINAL = r"(?i:\d+(?:st|nd|rd|th))\b"  # 3rd -> 3. (German and Czech write ordinals so)
# a number with what people type around it: a sign, a currency, a percent, dates 12/05/2023 and
# 2023-05-12, ranges 5-10; the sign only where no word or number is glued to its left
FORMATTED = r"(?:(?<![\w.,)])[-−+])?(?:[$€£¥]\s?)?\d+(?:[.,:/-]\d+)*(?:\s?[%€$£¥])?"
MARKUP_TOKEN = r"</?[A-Za-z][^<>]*>|\*\*|__|\]\([^)\s]+\)"  # tags, **, __, a Markdown link's "](url)"
MARKUP = MARKUP_TOKEN + r"|\[(?=[^\[\]]*\]\()"  # ... and its "[" (only before a "](")
MARKUP_FULL_RE = re.compile(MARKUP_TOKEN + r"|\[")  # is a protected span markup?
GLUE_NEXT, GLUE_PREV = "\ue002", "\ue003"  # in a span's output form: join it to the next / previous word
SPAN_RE = re.compile("|".join([URL, EMAIL, MARKUP, PHONE, ORDINAL, FORMATTED, PLACEHOLDER_RE.pattern]))
MASK_RE = re.compile("\ue000(\\d+)\ue001")  # a masked span while splitting sentences
LETTER_RE = re.compile(r"[^\W\d_]")
CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f\ue000-\ue003]")  # and the private marks used here

CaseForm = Literal["upper", "title", "as_is"]
Representable = Callable[[str], bool]
NameRule = Callable[[str], bool]  # whether a capitalised word is a name to copy verbatim


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


def split_between_spans(text: str, spans: list[tuple[int, int]], limit: int) -> list[str]:
    """`text` cut into parts of at most `limit` of its `spans` ((start, end), in order), each cut at
    the last space between two spans (the last after a `,;:` if any); where two spans have no space
    between them the part grows past `limit`. Returns `[text]` when it holds at most `limit`."""
    parts, begin = [], 0
    for k in range(limit, len(spans), limit):
        gap_start = spans[k - 1][1]
        gap = text[gap_start : spans[k][0]]
        after_mark = list(re.finditer(r"(?<=[,;:])\s", gap))
        space = (after_mark or list(re.finditer(r"\s", gap)) or [None])[-1]  # the last such space
        if space is not None and gap_start + space.start() > begin:
            parts.append(text[begin : gap_start + space.start()].strip())
            begin = gap_start + space.start()
    return [p for p in [*parts, text[begin:].strip()] if p]


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


def find_spans(
    text: str, representable: Representable | None = None, is_name: NameRule | None = None
) -> list[tuple[int, int]]:
    """(start, end) of every span `protect` would replace, in order (there may be more than
    `PLACEHOLDERS`)."""
    found = [m.span() for m in SPAN_RE.finditer(text)]
    if representable is not None:
        found += _unrepresentable_runs(text, representable, found)
    if is_name is not None:
        found += _names(text, is_name, found)
    return sorted(found)


def _names(text: str, is_name: NameRule, taken: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """(start, end) of each word outside `taken` that starts upper case, is not all capitals, and
    that `is_name` accepts."""
    inside = {i for a, b in taken for i in range(a, b)}
    return [
        m.span()
        for m in WORD_RE.finditer(text)
        if m.group()[0].isupper() and not m.group().isupper() and is_name(m.group())
        and not inside.intersection(range(*m.span()))
    ]  # fmt: skip


def protect(
    text: str, representable: Representable | None = None, is_name: NameRule | None = None
) -> tuple[str, list[str]]:
    """Replace numbers (with their signs, currencies, percent; dates, phone numbers, ordinals),
    URLs, e-mails, markup (tags, `**`, `__`, the brackets of a Markdown link and its URL), literal
    placeholders, given `representable(char)` runs of characters the tokenizer cannot represent,
    and given `is_name(word)` the capitalised words it calls names, by `PLACEHOLDERS` in order of
    appearance; returns the new text and what each placeholder stands for in the output (span i
    is behind `PLACEHOLDERS[i]`): the span itself, or for an ordinal its German form (`3rd` ->
    `3.`). Markup glued to a word is given to the model as a word of its own (`<b>big</b>` ->
    `｟1｠ big ｟2｠`, as the model saw placeholders in training) and glued back by `restore`.
    Spans beyond the ninth stay in place: split such a text first
    (`pipeline.serving.translator.prepare` does)."""
    out, spans, last, opened = [], [], 0, set()
    for start, end in find_spans(text, representable, is_name)[: len(PLACEHOLDERS)]:
        span, before, after = text[start:end], "", ""
        form = output_form(span)
        if MARKUP_FULL_RE.fullmatch(span):
            if _opens(span, opened) and text[end : end + 1].strip():
                after, form = " ", form + GLUE_NEXT
            elif not _opens(span, opened) and text[start - 1 : start].strip():
                before, form = " ", GLUE_PREV + form
            opened ^= {span} if span in ("**", "__") else set()
        out += [text[last:start], before, PLACEHOLDERS[len(spans)], after]
        spans.append(form)
        last = end
    return "".join(out) + text[last:], spans


def _opens(markup: str, opened: set[str]) -> bool:
    """Whether `markup` opens a span of text (`<b>`, `[`, the first `**` of a pair) rather than
    closing one (`</b>`, `](url)`, the second `**`); `opened` holds the `**`/`__` now open."""
    if markup in ("**", "__"):
        return markup not in opened
    return not markup.startswith(("</", "]"))


def output_form(span: str) -> str:
    """How a protected span is written in the translation: an English ordinal becomes the German
    one (`21st` -> `21.`), anything else stays verbatim."""
    return re.sub(r"(?i)^(\d+)(?:st|nd|rd|th)$", r"\1.", span)


def missing_placeholders(text: str, n_spans: int) -> int:
    """How many of the first `n_spans` placeholders `text` lacks."""
    return sum(PLACEHOLDERS[i] not in text for i in range(n_spans))


def restore(text: str, spans: list[str]) -> str:
    """Put `spans` back in place of their placeholders in one pass (the first occurrence of each;
    repeats and unknown placeholders are dropped with the space before them); a span whose
    placeholder is missing is appended, so none is lost. A span that looks like a placeholder
    itself is put back verbatim."""
    used: set[int] = set()

    def put(match: re.Match) -> str:
        i = int(match.group()[-2]) - 1  # " ｟N｠" -> N - 1
        if i >= len(spans) or i in used:
            return ""
        used.add(i)
        return match.group()[:-3] + spans[i]

    text = re.sub(f" ?{PLACEHOLDER_RE.pattern}", put, text)
    if any(re.fullmatch(r"\d+\.", span) for span in spans):  # a German ordinal ends the sentence
        text = re.sub(r"(\d)\.\.(?!\.)", r"\1.", text)
    tail = [span for i, span in enumerate(spans) if i not in used]
    text = re.sub(r" {2,}", " ", " ".join([text.strip(), *tail])).strip()
    return re.sub(f" *{GLUE_PREV}", "", re.sub(f"{GLUE_NEXT} *", "", text))


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


def collapse_punctuation(text: str, source: str, max_run: int = MAX_RUN) -> str:
    """A run of more than `max_run` copies of one punctuation mark (`)))))`, a degenerate decoding
    loop between words) cut to one copy, unless the same run is in `source`."""

    def cut(match: re.Match) -> str:
        return match.group() if match.group() in source else match.group(1)

    return re.sub(rf"([^\w\s])\1{{{max_run},}}", cut, text)


def clean(line: str) -> str:
    """`line` in Unicode NFC (a combining accent joins its letter: NFD `café` becomes `café`), with
    control characters (NUL, escape, ...) removed and tabs as spaces."""
    line = unicodedata.normalize("NFC", line).replace("\t", " ")
    return CONTROL_RE.sub("", line)


def collapse_repeats(text: str, max_run: int = MAX_RUN) -> str:
    """Drop the repetitions of a whitespace token beyond `max_run` in a row (a degenerate
    decoding loop such as `ist ist ist ist ist`)."""
    out: list[str] = []
    for token in text.split(" "):
        if len(out) >= max_run and all(t == token for t in out[-max_run:]):
            continue
        out.append(token)
    return " ".join(out)
