"""Degenerate decoding loops cut from a translation: no whitespace token repeated more than
`MAX_RUN` times in a row, nor a punctuation mark the input does not repeat so."""

from __future__ import annotations

import re

MAX_RUN = 3  # at most this many identical tokens in a row in an output


def collapse_repeats(text: str, max_run: int = MAX_RUN) -> str:
    """Drop the repetitions of a whitespace token beyond `max_run` in a row (a degenerate
    decoding loop such as `ist ist ist ist ist`)."""
    out: list[str] = []
    for token in text.split(" "):
        if len(out) >= max_run and all(t == token for t in out[-max_run:]):
            continue
        out.append(token)
    return " ".join(out)


def collapse_punctuation(text: str, source: str, max_run: int = MAX_RUN) -> str:
    """A run of more than `max_run` copies of one punctuation mark (`)))))`, a degenerate decoding
    loop between words) cut to one copy, unless the same run is in `source`."""

    def cut(match: re.Match) -> str:
        return match.group() if match.group() in source else match.group(1)

    return re.sub(rf"([^\w\s])\1{{{max_run},}}", cut, text)
