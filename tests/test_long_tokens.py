"""A line that is one very long word (nothing to cut at a space) through the translator and
`mt-translate` on the tiny model: every model input fits the trained maximum, so time and memory
grow linearly with the line. Before, a 200,000-character word was one 200,001-piece source, whose
self-attention alone asked for 640 GB."""

from __future__ import annotations

import io
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import pytest

from pipeline.core.config import DecodeConfig
from pipeline.ops.cli import main as translate_main
from pipeline.serving.torch_engine import TorchEngine
from pipeline.serving.translator import MAX_SRC_PIECES, load_translator, translate_lines

WORD = "x" * 200_000  # 200,001 pieces of the tiny tokenizer: 1,588 model inputs
# greedy, at most 2 output pieces per input: the tests time the split, not the search
SHORT = DecodeConfig(beam_size=1, max_len_a=0.0, max_len_b=2)
SHORT_FLAGS = ["--beam-size", "1", "--max-len-a", "0", "--max-len-b", "2"]


@pytest.fixture(scope="module")
def engine(tiny_translator_files: Mapping[str, Path]) -> TorchEngine:
    return load_translator(tiny_translator_files["ckpt"], tiny_translator_files["spm"])


def test_a_200k_character_word_is_translated_in_seconds(engine: TorchEngine, monkeypatch) -> None:
    seen: list[str] = []
    translate = engine.translate
    monkeypatch.setattr(
        engine, "translate", lambda texts, *args: seen.extend(texts) or translate(texts, *args)
    )
    start = time.process_time()  # CPU seconds (torch on one thread): wall time depends on the machine's load
    [out] = translate_lines(engine, [WORD], SHORT)
    assert time.process_time() - start < 10
    assert out.strip()
    assert max(len(engine.tokenizer.encode(text)) for text in seen) <= MAX_SRC_PIECES - 1  # eos: 1
    assert "".join(seen) == WORD  # every character reached the model once


MEASURE = """
import resource, sys, torch
from pipeline.core.config import DecodeConfig
from pipeline.serving.translator import load_translator, translate_lines
torch.set_num_threads(1)
engine = load_translator(sys.argv[1], sys.argv[2])
cfg = DecodeConfig(beam_size=1, max_len_a=0.0, max_len_b=2)
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


def test_mt_translate_takes_a_200k_character_word_and_draws_a_line_that_fits(
    tiny_translator_files: Mapping[str, Path], tmp_path: Path, capsys, monkeypatch
) -> None:
    png = tmp_path / "attention.png"
    monkeypatch.setattr("sys.stdin", io.StringIO(f"{WORD}\nA man walks in the park.\n"))
    files = ["--checkpoint", str(tiny_translator_files["ckpt"]), "--spm", str(tiny_translator_files["spm"])]
    translate_main([*files, *SHORT_FLAGS, "--attention", str(png)])
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 2 and all(line.strip() for line in out.splitlines())
    assert "translated in 1588 parts" in err
    assert png.stat().st_size > 1000  # the second line's map: the first is too long to draw
