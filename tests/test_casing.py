"""ALL-CAPS and Title-Case input translated sentence-cased; ALL-CAPS output upper-cased again."""

from __future__ import annotations

from pipeline.serving.casing import case_form, normalise_case, restore_case


def test_case_forms() -> None:
    assert case_form("A MAN IS WALKING HIS DOG.") == "upper"
    assert case_form("Man Bites Dog In Park") == "title"
    assert case_form("A man bites a dog.") == "as_is"
    assert case_form("A 5.") == "as_is"  # one letter is no evidence
    assert case_form("Dog In Park 3") == "title" and case_form("Dog park") == "as_is"


def test_normalise_case_keeps_placeholders_and_as_is_text() -> None:
    assert normalise_case("A MAN IS WALKING ｟1｠ DOGS.", "upper") == "A man is walking ｟1｠ dogs."
    assert normalise_case("｟1｠ MEN WALK.", "upper") == "｟1｠ Men walk."
    assert normalise_case("A MAN.", "as_is") == "A MAN."


def test_restore_case() -> None:
    assert restore_case("Ein Mann geht.", "upper") == "EIN MANN GEHT."
    assert restore_case("Ein Mann geht.", "title") == "Ein Mann geht."
    assert restore_case("Ein Mann geht.", "as_is") == "Ein Mann geht."
