"""Input that is not plain English text: SentencePiece pieces are joined back into text, and a line
that a language identifier (py3langid, offline) reads as another language gets a warning.

The model translates English only; German or French in comes back as confident nonsense.
"""

from __future__ import annotations

import functools
import sys

from py3langid.langid import MODEL_FILE, LanguageIdentifier

PIECE_MARK = "\u2581"  # SentencePiece's word-start mark "▁"
MIN_CONFIDENCE = 0.9  # English captions almost never reach it as another language; German ones almost all do


@functools.cache
def _identifier() -> LanguageIdentifier:
    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


def join_pieces(line: str) -> str:
    """`line` with SentencePiece pieces joined back into words ("▁A ▁man ." -> "A man."); a line
    without the mark "▁" is returned unchanged."""
    if PIECE_MARK not in line:
        return line
    return "".join(line.split()).replace(PIECE_MARK, " ").strip()


def language(text: str) -> tuple[str, float]:
    """The ISO 639-1 code of `text`'s most likely language and its probability (0..1) among the
    identifier's 97 languages. Short texts get low probabilities."""
    return _identifier().classify(text)


def checked(number: int, line: str) -> str:
    """Line `number` (0-based) ready for translation: pieces joined back (with a warning on stderr),
    and a warning when it reads as another language than English with probability >= 0.9."""
    joined = join_pieces(line)
    if joined != line:
        print(f"warning: line {number + 1}: SentencePiece pieces (▁) joined back into text", file=sys.stderr)
    if joined.strip():
        code, probability = language(joined)
        if code != "en" and probability >= MIN_CONFIDENCE:
            print(
                f"warning: line {number + 1}: this reads as language '{code}' (p={probability:.2f}), "
                "not English; the model translates English only",
                file=sys.stderr,
            )
    return joined
