"""Everything the pipeline knows about a language, in one table; `download.tgt_lang` picks the target.

English is always the source. Per language: its name; the number words two..ten that
`pipeline.data.placeholders.protect_pair` turns into placeholders (an entry may list inflected forms, `a|b`);
how it writes an ordinal (what replaces an English `3rd`); the Multi30k splits it lacks; whether the
tutorial's time-machine outputs (German only) compare with ours. Moses and SentencePiece need only the code.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Language:
    """One language of the pipeline (ISO 639-1 `code`)."""

    code: str
    name: str
    number_words: tuple[str, ...]  # two .. ten, lower case; "a|b" = either form
    missing_splits: tuple[str, ...] = ()  # Multi30k splits never published in this language
    time_machine: bool = False  # the tutorial's time-machine outputs are in this language
    ordinal: str = "{n}."  # an ordinal number `n` as written in this language (as a target)

    def ordinal_form(self, number: str) -> str:
        """The ordinal of the digits `number` as this language writes it: `3` -> `3.` (de, cs), `3e` (fr)."""
        return self.ordinal.format(n=number)


SOURCE = Language("en", "English", ("two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"))
TARGETS = {
    "de": Language(
        "de",
        "German",
        ("zwei", "drei", "vier", "fünf", "sechs", "sieben", "acht", "neun", "zehn"),
        time_machine=True,
    ),
    "fr": Language(
        "fr",
        "French",
        ("deux", "trois", "quatre", "cinq", "six", "sept", "huit", "neuf", "dix"),
        ordinal="{n}e",  # 3e; also 1e, as the usual 1er / 1re depends on the noun's gender
    ),
    "cs": Language(
        "cs",
        "Czech",
        ("dva|dvě", "tři", "čtyři", "pět", "šest", "sedm", "osm", "devět", "deset"),
        missing_splits=("test_2017_flickr",),
    ),
}


def target(code: str) -> Language:
    """The target language `code` (a `download.tgt_lang` value).

    Raises:
        KeyError: not a target language of this pipeline (names the supported ones).
    """
    if code not in TARGETS:
        raise KeyError(f"unknown target language {code!r} (one of {', '.join(TARGETS)})")
    return TARGETS[code]
