"""Placeholders in training pairs (`protect_pair`) and the language table they read."""

from __future__ import annotations

import typing

import pytest

from pipeline.core.config import DownloadConfig
from pipeline.data import placeholders as ph
from pipeline.data.languages import SOURCE, TARGETS, target


def test_protect_pair_digits_and_number_words() -> None:
    en, de = ph.protect_pair("A man holds 3 balloons at 5:30.", "Ein Mann hält 3 Ballons um 5:30.")
    assert (en, de) == ("A man holds ｟1｠ balloons at ｟2｠.", "Ein Mann hält ｟1｠ Ballons um ｟2｠.")
    en, de = ph.protect_pair("Room 12 has 4 beds.", "Zimmer 12 hat vier Betten.")  # 4 not on both sides
    assert en == "Room ｟1｠ has 4 beds." and de == "Zimmer ｟1｠ hat vier Betten."
    pairs = [(f"Two men play game {i}.", f"Zwei Männer spielen Spiel {i}.") for i in range(2000)]
    done = [ph.protect_pair(e, d) for e, d in pairs]
    words = [(e, d) for e, d in done if e.startswith("｟2｠ men") and d.startswith("｟2｠ Männer")]
    assert 0.25 < len(words) / len(pairs) < 0.35
    assert done == [ph.protect_pair(e, d) for e, d in pairs]  # deterministic
    assert ph.protect_pair("Two men and three dogs.", "Zwei Männer und drei Hunde.")[0].startswith("Two")
    assert ph.protect_pair("Two men.", "Drei Männer.") == ("Two men.", "Drei Männer.")


@pytest.mark.parametrize(
    ("tgt_lang", "sentence", "marked"),
    [
        ("fr", "Deux hommes jouent au football.", "｟1｠ hommes jouent au football."),
        ("cs", "Dvě ženy hrají fotbal.", "｟1｠ ženy hrají fotbal."),
        ("de", "Zwei Männer spielen Fußball.", "｟1｠ Männer spielen Fußball."),
    ],
)
def test_number_words_fire_for_every_target_language(tgt_lang, sentence, marked) -> None:
    pairs = [(f"Two people play football {'!' * i}", sentence) for i in range(200)]
    done = [ph.protect_pair(en, tgt, tgt_lang=tgt_lang) for en, tgt in pairs]
    hits = [(en, tgt) for en, tgt in done if tgt == marked]
    assert 30 < len(hits) < 90 and all(en.startswith("｟1｠ people") for en, _ in hits)
    other = next(code for code in TARGETS if code != tgt_lang and code != "cs")
    assert all(ph.protect_pair(en, tgt, tgt_lang=other) == (en, tgt) for en, tgt in pairs)  # other words


def test_the_table_covers_the_configurable_targets() -> None:
    choices = typing.get_args(DownloadConfig.model_fields["tgt_lang"].annotation)
    assert set(choices) == set(TARGETS)
    assert all(len(lang.number_words) == len(SOURCE.number_words) == 9 for lang in TARGETS.values())
    assert [code for code, lang in TARGETS.items() if lang.time_machine] == ["de"]
    with pytest.raises(KeyError, match="one of de, fr, cs"):
        target("xx")
