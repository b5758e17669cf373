"""Input that is not plain English: pieces joined back, other languages warned about."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import pytest

from pipeline.serving.source_check import checked, join_pieces


def test_pre_encoded_pieces_are_joined_back_into_words() -> None:
    assert join_pieces("▁A ▁man ▁is ▁walk ing .") == "A man is walking."
    assert join_pieces("A man is walking.") == "A man is walking."


@pytest.mark.parametrize(
    ("line", "code"),
    [("Ein Mann geht mit seinem Hund im Park spazieren.", "de"), ("Un homme marche avec son chien.", "fr")],
)
def test_a_line_in_another_language_is_translated_with_a_warning_naming_it(line, code, capsys) -> None:
    assert checked(4, line) == line
    err = capsys.readouterr().err
    assert f"line 5: this reads as language '{code}'" in err and "English only" in err


@pytest.mark.parametrize(
    "line", ["A man is walking his dog in the park.", "A dog runs.", "TWO MEN ARE PLAYING FOOTBALL", "OK", ""]
)
def test_english_and_short_lines_get_no_warning(line, capsys) -> None:
    assert checked(0, line) == line
    assert capsys.readouterr().err == ""


def test_no_english_line_of_the_val_set_gets_a_language_warning(capsys) -> None:
    mirror = os.environ.get("MULTI30K_MIRROR")
    path = Path(mirror or "", "val.en.gz")
    if not mirror or not path.is_file():
        pytest.skip("needs MULTI30K_MIRROR (a folder with val.en.gz)")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        lines = f.read().splitlines()
    for number, line in enumerate(lines):
        checked(number, line)
    assert len(lines) > 1000 and capsys.readouterr().err == ""
