"""Degenerate decoding loops cut from a translation."""

from __future__ import annotations

from pipeline.serving.repeats import MAX_RUN, collapse_punctuation, collapse_repeats


def test_collapse_repeats() -> None:
    assert collapse_repeats("ist ist ist ist ist gut gut") == "ist ist ist gut gut"
    assert collapse_repeats("ja ja ja", max_run=1) == "ja"
    assert MAX_RUN == 3


def test_punctuation_runs_are_cut_unless_the_source_has_them() -> None:
    assert collapse_punctuation("„Hallo“))))) ja", 'said "hello" (quietly)') == "„Hallo“) ja"
    assert collapse_punctuation("Hilfe!!!!", "Help!!!!") == "Hilfe!!!!"
    assert collapse_punctuation("Nein!!!", "No") == "Nein!!!"  # MAX_RUN copies are allowed
