"""A line that is one very long word (nothing to cut at a space) through the translator and
`mt-translate` on the tiny model: a word longer than the trained maximum is copied, not
translated, so it costs a tokenizer pass and nothing of the model. Before, a 200,000-character
word was one 200,001-piece source, whose self-attention alone asked for 640 GB; later 1,588 model
inputs, seconds to minutes."""

from __future__ import annotations

import io
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import pytest
from from_params import from_params
from tiny_translator import model_flags

from pipeline.core.config import DecodeConfig
from pipeline.ops.cli import main as translate_main
from pipeline.serving.torch_engine import TorchEngine
from pipeline.serving.translator import load_translator, max_src_pieces, translate_lines

WORD = "x" * 200_000  # 200,001 pieces of the tiny tokenizer
# greedy, at most 2 output pieces per input: short translations of the rest of a line
SHORT = from_params(DecodeConfig, beam_size=1, max_len_a=0.0, max_len_b=2)
SHORT_FLAGS = ["--beam-size", "1", "--max-len-a", "0", "--max-len-b", "2"]


@pytest.fixture(scope="module")
def engine(tiny_translator_files: Mapping[str, Path]) -> TorchEngine:
    return load_translator(tiny_translator_files["ckpt"], tiny_translator_files["spm"])


def watched(engine: TorchEngine, monkeypatch) -> list[str]:
    """The texts `engine.translate` is given from now on."""
    seen: list[str] = []
    translate = engine.translate
    monkeypatch.setattr(
        engine, "translate", lambda texts, *args: seen.extend(texts) or translate(texts, *args)
    )
    return seen


def test_a_200k_character_word_is_copied_in_a_second(engine: TorchEngine, monkeypatch, capsys) -> None:
    seen = watched(engine, monkeypatch)
    start = time.process_time()  # CPU seconds: wall time depends on the machine's load
    [out] = translate_lines(engine, [WORD], SHORT)
    assert time.process_time() - start < 1
    assert out == WORD and seen == []  # the model never saw it
    assert (
        "line 1: a word of 200000 characters (over 127 pieces) is copied untranslated"
        in capsys.readouterr().err
    )


def test_the_words_around_a_long_word_are_translated(engine: TorchEngine, monkeypatch) -> None:
    seen = watched(engine, monkeypatch)
    blob = "QUJD" * 100  # base64-like: 400 characters, over the 127 pieces
    [out] = translate_lines(engine, [f"A man walks. A dog sees {blob} in the park."], SHORT)
    assert seen == ["A man walks.", "A dog sees", "in the park."]
    assert out.count(blob) == 1 and out.index(blob) > 0 and not out.endswith(blob)
    assert max(len(engine.tokenizer.encode(text)) for text in seen) <= max_src_pieces() - 1  # eos: 1


MEASURE = """
import resource, sys, torch
from pipeline.core.params_file import default_params, with_updates
from pipeline.serving.translator import load_translator, translate_lines
torch.set_num_threads(1)
engine = load_translator(sys.argv[1], sys.argv[2])
cfg = with_updates(default_params().decode, dict(beam_size=1, max_len_a=0.0, max_len_b=2))
translate_lines(engine, ["A man walks in the park."], cfg)  # first-call allocations
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
[out] = translate_lines(engine, ["x" * 200_000], cfg)
print(before, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, len(out))
"""


def test_a_200k_character_word_takes_little_memory(tiny_translator_files: Mapping[str, Path]) -> None:
    """Peak resident memory (its own process) grows by less than 200 MB while translating it."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            MEASURE,
            str(tiny_translator_files["ckpt"]),
            str(tiny_translator_files["spm"]),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    before_kb, after_kb, out_chars = map(int, done.stdout.split())
    assert out_chars > 0 and after_kb - before_kb < 200_000, (before_kb, after_kb)


def test_mt_translate_copies_a_200k_character_word_and_draws_a_line_that_fits(
    tiny_translator_files: Mapping[str, Path], tmp_path: Path, capsys, monkeypatch
) -> None:
    png = tmp_path / "attention.png"
    monkeypatch.setattr("sys.stdin", io.StringIO(f"{WORD}\nA man walks in the park.\n"))
    files = model_flags(tiny_translator_files)
    translate_main([*files, *SHORT_FLAGS, "--attention", str(png)])
    out, err = capsys.readouterr()
    first, second = out.splitlines()
    assert first == WORD and second.strip()
    assert "copied untranslated" in err
    assert png.stat().st_size > 1000  # the second line's map: the first is too long to draw
