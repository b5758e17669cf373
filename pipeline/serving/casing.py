"""The casing of real input: ALL-CAPS and Title-Case sentences are translated sentence-cased (the
model saw few of them in training), and an ALL-CAPS sentence's translation is upper-cased again."""

from __future__ import annotations

import re
from typing import Literal

CaseForm = Literal["upper", "title", "as_is"]
LETTER_RE = re.compile(r"[^\W\d_]")


def case_form(text: str) -> CaseForm:
    """ "upper" when every cased letter is upper case (at least two letters), "title" when at least
    three words and every word starts upper case, else "as_is"."""
    letters = [c for c in text if c.isalpha() and c.lower() != c.upper()]
    if len(letters) >= 2 and all(c.isupper() for c in letters):
        return "upper"
    words = re.findall(r"[^\W\d_]+", text)
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


def restore_case(output: str, form: CaseForm) -> str:
    """The `output` in its input's case: upper-cased for "upper" input; "title" output is kept as
    the model wrote it (a headline in the target language's own capitalisation)."""
    return output.upper() if form == "upper" else output
