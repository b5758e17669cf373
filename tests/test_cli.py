"""The shared translate path on a tiny model trained here (seconds): the robustness table,
`mt-translate` on files (batched) and from any directory, `--n-best`, and the one model loader."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import pytest
from from_params import from_params, write_changed_params
from tiny_translator import ROBUSTNESS_TABLE, model_flags

from pipeline.core.config import DecodeConfig, Params
from pipeline.core.errors import CheckpointError, ConfigError
from pipeline.core.git import repo_root
from pipeline.ops.cli import DEFAULT_PARAMS, checkpoint_path, parser, spm_path
from pipeline.ops.cli import main as translate_main
from pipeline.ops.robustness import longest_run, pass_rate, read_table, uppercase_bleu
from pipeline.serving.torch_engine import TorchEngine
from pipeline.serving.translator import load_translator, translate_lines, translate_lines_n_best
from pipeline.training import checkpoint

CFG = from_params(DecodeConfig, beam_size=2, max_len_a=1.2, max_len_b=4, batch_size=16)


def decode_flags(cfg: DecodeConfig) -> list[str]:
    """`mt-translate` flags that decode as `cfg` does (instead of with params.yaml's decode section)."""
    return [
        "--beam-size",
        str(cfg.beam_size),
        "--length-penalty",
        str(cfg.length_penalty),
        "--max-len-a",
        str(cfg.max_len_a),
        "--max-len-b",
        str(cfg.max_len_b),
    ]


@pytest.fixture(scope="module")
def loaded(tiny_translator_files: Mapping[str, Path]) -> TorchEngine:
    return load_translator(tiny_translator_files["ckpt"], tiny_translator_files["spm"])


def test_robustness_table_passes(loaded: TorchEngine) -> None:
    result = pass_rate(loaded, read_table(ROBUSTNESS_TABLE), CFG, max_pieces=24)
    assert result.total >= 40
    assert result.passed == result.total, result.failed


def test_real_input_kinds(loaded: TorchEngine, capsys) -> None:
    lines = [
        "A man holds 3 balloons and 12 flowers at 5:30 pm.",
        "Visit www.example.com for photos of the 2024 parade.",
        "🙂🙂",
        "A MAN IS WALKING HIS DOG IN THE PARK.",
        " ".join(["A man walks in the park."] * 12),
    ]
    out = translate_lines(loaded, lines, CFG)
    for span in ("3", "12", "5:30", "www.example.com", "2024"):
        assert span in out[0] + out[1]
    assert out[2] == "🙂🙂"
    assert out[3] == out[3].upper() and any(c.isalpha() for c in out[3])
    assert len(out) == 5 and longest_run(out[4]) <= 3 and len(out[4].split()) >= 12


def test_uppercase_bleu_is_computed(loaded: TorchEngine) -> None:
    en = ["A man walks in the park.", "Two children play near 5 trees."]
    refs = ["Ein Mann geht im Park.", "Zwei Kinder spielen bei 5 Bäumen."]
    hyps = translate_lines(loaded, en, CFG)
    normal, upper = uppercase_bleu(loaded, en, refs, hyps, CFG)
    assert 0.0 <= normal <= 100.0 and 0.0 <= upper <= 100.0


def cli(files: Mapping[str, Path], *args: str) -> list[str]:
    argv = [*model_flags(files), *decode_flags(CFG), *args]
    translate_main(argv)
    return []


def test_file_input_is_batched_and_equals_line_by_line(
    tiny_translator_files, loaded, capsys, monkeypatch
) -> None:
    lines = ["A man walks in the park.", "", "Two children play near 5 trees. A dog walks.", "🙂"] * 80
    monkeypatch.setattr("sys.stdin", io.StringIO("".join(line + "\n" for line in lines)))
    cli(tiny_translator_files)
    out = capsys.readouterr().out.split("\n")[:-1]
    assert len(out) == len(lines) and all(o == "" for o in out[1::4])
    cfg = CFG.model_copy(update={"beam_size": 2})
    assert out[:4] == [translate_lines(loaded, [line], cfg)[0] for line in lines[:4]]


@pytest.mark.parametrize("end", ["\r", "\r\n"])
def test_cr_and_crlf_line_ends_read_as_lines(tiny_translator_files, capsys, monkeypatch, end: str) -> None:
    lines = ["A man walks in the park.", "Two dogs.", "A red car."]
    answers = []
    for ending in ("\n", end):
        raw = "".join(line + ending for line in lines).encode()
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(raw), encoding="utf-8"))
        cli(tiny_translator_files)
        answers.append(capsys.readouterr().out.split("\n")[:-1])
    assert len(answers[0]) == 3 and answers[1] == answers[0]


def test_n_best_prints_k_numbered_ranked_lines_per_input(tiny_translator_files, capsys) -> None:
    cli(
        tiny_translator_files,
        "--n-best",
        "2",
        "A man walks in the park.",
        "",
        "🙂",
        "Two children play. A dog walks.",
    )
    rows = [line.split("\t") for line in capsys.readouterr().out.split("\n")[:-1]]
    assert [(r[0], r[1]) for r in rows] == [(str(n), str(k)) for n in range(1, 5) for k in (1, 2)]
    scores = [float(r[2]) for r in rows]
    assert scores[0] >= scores[1] and scores[6] >= scores[7] and all(s <= 0 for s in scores)
    assert rows[2][3] == rows[3][3] == "" and rows[4][3] == rows[5][3] == "🙂"
    assert scores[2:6] == [0.0] * 4 and all(r[3] for r in rows[:2] + rows[6:])


def test_decoding_flags_reach_the_search_and_are_validated(tiny_translator_files, capsys) -> None:
    cli(
        tiny_translator_files,
        "--max-len-a",
        "0",
        "--max-len-b",
        "1",
        "--batch-size",
        "1",
        "A man walks in the park.",
    )
    assert len(capsys.readouterr().out.split()) <= 1  # at most one piece of output
    with pytest.raises(ConfigError, match="--batch-size: Input should be greater than 0"):
        cli(tiny_translator_files, "--batch-size", "0", "x")
    with pytest.raises(ConfigError, match="--length-penalty: Input should be a finite number"):
        cli(tiny_translator_files, "--length-penalty", "inf", "x")
    with pytest.raises(SystemExit) as exit_info:
        translate_main(["--version"])
    assert exit_info.value.code == 0 and capsys.readouterr().out.startswith("mt-translate ")


def test_the_target_language_comes_from_the_params_file(tiny_translator_files, tmp_path, monkeypatch) -> None:
    import pipeline.ops.cli as cli_module

    seen = []

    def recording(engine, lines, cfg, **kwargs):
        seen.append(kwargs["tgt_lang"])
        return translate_lines(engine, lines, cfg, **kwargs)

    monkeypatch.setattr(cli_module, "translate_lines", recording)
    params = tmp_path / "params.yaml"
    write_changed_params(params, {"download": {"tgt_lang": "fr"}})
    cli(tiny_translator_files, "--params", str(params), "He came 1st.")
    cli(tiny_translator_files, "He came 1st.")  # the repository's params.yaml: German
    assert seen == ["fr", "de"]


def test_defaults_resolve_from_the_repository(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    args, params = parser().parse_args([]), from_params(Params)
    assert checkpoint_path(args, params) == repo_root() / params.train.out_dir / "model.pt"
    assert spm_path(args, params) == repo_root() / params.tokenizer.out_dir / "spm.model"
    assert DEFAULT_PARAMS == repo_root() / "params.yaml"
    assert os.getcwd() == str(tmp_path)


def test_one_loader_checks_special_ids(tiny_translator_files, tmp_path) -> None:
    state = checkpoint.load(tiny_translator_files["ckpt"])
    checkpoint.save(tmp_path / "bad.pt", state | {"eos_id": 7})
    with pytest.raises(CheckpointError, match="special ids"):
        load_translator(tmp_path / "bad.pt", tiny_translator_files["spm"])


def test_ctranslate2_engine_gives_our_greedy_output(tiny_translator_files, loaded, capsys, tmp_path) -> None:
    """`--engine ctranslate2` goes through the same processing; greedy decoding is identical."""
    from pipeline.serving.ct2 import export_ctranslate2

    export_ctranslate2(loaded.model, loaded.tokenizer, tmp_path / "ct2")
    lines = ["A man walks in the park.", "Two children play near 5 trees. A dog walks.", "🙂"]
    greedy_cfg = CFG.model_copy(update={"beam_size": 1})
    argv = [
        *model_flags(tiny_translator_files),
        *decode_flags(greedy_cfg),
    ]
    ct2 = [*argv, "--engine", "ctranslate2", "--ct2-dir", str(tmp_path / "ct2"), "--compute-type", "float32"]
    translate_main([*ct2, *lines])
    out = capsys.readouterr().out.split("\n")[:-1]
    assert out == translate_lines(loaded, lines, greedy_cfg)
    translate_main([*ct2, "--n-best", "1", lines[0]])
    _, _, score, text = capsys.readouterr().out.rstrip("\n").split("\t")
    ours_text, ours_score = translate_lines_n_best(loaded, [lines[0]], greedy_cfg, 1)[0][0]
    assert text == ours_text and float(score) == pytest.approx(ours_score, abs=0.01)  # close, not bit-equal
    with pytest.raises(ConfigError, match="--attention needs --engine torch"):
        translate_main([*argv, "--engine", "ctranslate2", "--attention", str(tmp_path / "a.png"), "x"])


def translate_process(files: Mapping[str, Path], tmp_path: Path, stdin) -> subprocess.Popen:
    """`python -m pipeline translate` on the tiny model (greedy), stdout and stderr piped."""
    params = tmp_path / "defaults.yaml"
    write_changed_params(params)
    cmd = [
        sys.executable,
        "-m",
        "pipeline",
        "translate",
        *model_flags(files),
        "--params",
        str(params),
        "--beam-size",
        "1",
    ]
    return subprocess.Popen(
        cmd,
        cwd=tmp_path,
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=default_sigint,
    )


def default_sigint() -> None:
    """Ctrl-C as in a terminal: a shell's background job (`pytest &`) starts with SIGINT ignored,
    which exec would pass on to the child (and Python keeps an inherited SIG_IGN)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_a_reader_that_stops_early_ends_it_quietly(tiny_translator_files, tmp_path) -> None:
    """`mt-translate < file | head -1`: the reader goes away while batches remain."""
    source = tmp_path / "in.en"
    source.write_text("A man walks in the park.\n" * 1000)  # 4 batches
    with source.open("rb") as stdin:
        proc = translate_process(tiny_translator_files, tmp_path, stdin)
        first = proc.stdout.readline()
        proc.stdout.close()
        err = proc.stderr.read()
        proc.wait(timeout=120)
    assert first.strip() and proc.returncode == 141 and err == b""  # 128 + SIGPIPE, no traceback


def test_ctrl_c_ends_it_quietly_with_exit_130(tiny_translator_files, tmp_path) -> None:
    proc = translate_process(tiny_translator_files, tmp_path, subprocess.PIPE)
    proc.stdin.write(b"A dog walks.\n" * 300)  # one batch of 256 lines, then it waits for more
    proc.stdin.flush()
    for _ in range(256):
        assert proc.stdout.readline()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and err == b""


def wait_until_torch_loads(proc: subprocess.Popen, timeout_s: float = 120) -> None:
    """Return once `proc` has mapped torch's libraries: our code is running and importing torch.

    (A Ctrl-C earlier, while Python itself starts, gets Python's own traceback: no code of ours
    has run yet, on a busy machine for a second or more.)
    """
    maps, deadline = Path(f"/proc/{proc.pid}/maps"), time.monotonic() + timeout_s
    while "torch" not in maps.read_text():
        assert time.monotonic() < deadline and proc.poll() is None, "torch never loaded"
        time.sleep(0.005)


@pytest.mark.parametrize("delay", [0.0, 0.3])
def test_ctrl_c_while_starting_is_quiet_too(delay: float, tiny_translator_files, tmp_path) -> None:
    """Ctrl-C while torch is still importing (its first second or two): exit 130, no traceback."""
    proc = translate_process(tiny_translator_files, tmp_path, subprocess.PIPE)  # then waits for stdin
    wait_until_torch_loads(proc)
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and err == b""


def test_odd_characters_never_reach_the_output(tiny_translator_files, capsys) -> None:
    cli(
        tiny_translator_files, "A dog\x00 runs\x1b.", "Two men drink a cafe\u0301.", "The label ｟1｠ is new."
    )
    out = capsys.readouterr().out
    assert "\x00" not in out and "\x1b" not in out and "\u0301" not in out
    assert out.split("\n")[2].count("｟1｠") == 1


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_python_m_pipeline_help_prints_the_usage_and_succeeds(flag: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pipeline", flag], capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, done.stderr) == (0, "") and done.stdout.startswith(
        "usage: python -m pipeline translate"
    )
    wrong = subprocess.run(
        [sys.executable, "-m", "pipeline", "nosuch"], capture_output=True, text=True, timeout=60
    )
    assert wrong.returncode == 1 and wrong.stderr.startswith("usage:")


# ---------------------------------------------------------------- locales, flags, a full disk, progress

NON_ASCII = ["Two men drink a café. 🙂", "A dog walks über the bridge."]  # "🙂" is kept as it is
GREEDY = from_params(DecodeConfig, beam_size=1)


def translate_bytes(
    files: Mapping[str, Path], tmp_path: Path, args: list[str], stdin: bytes, env: dict, **kw
):
    """`python -m pipeline translate` (greedy) on the tiny model, with `env` added to the environment."""
    cmd = [sys.executable, "-m", "pipeline", "translate", *model_flags(files), "--beam-size", "1", *args]
    params = write_changed_params(tmp_path / "defaults.yaml")
    return subprocess.run(
        [*cmd, "--params", str(params)],
        cwd=tmp_path,
        input=stdin,
        env={**os.environ, **env},
        capture_output="stdout" not in kw,
        timeout=300,
        **kw,
    )


NOT_UTF8_LOCALES = {
    "C, ascii": {"LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONIOENCODING": "ascii"},
    "latin-1": {"LC_ALL": "C.UTF-8", "PYTHONIOENCODING": "latin-1"},
}


@pytest.mark.parametrize("locale", NOT_UTF8_LOCALES)
def test_stdin_and_stdout_are_utf8_whatever_the_locale(
    tiny_translator_files, loaded, tmp_path, locale
) -> None:
    want = translate_lines(loaded, NON_ASCII, GREEDY, max_pieces=from_params(Params).train.max_len)
    assert any(not line.isascii() for line in want)
    stdin = "".join(line + "\n" for line in NON_ASCII).encode("utf-8")
    done = translate_bytes(tiny_translator_files, tmp_path, [], stdin, NOT_UTF8_LOCALES[locale])
    assert done.returncode == 0 and b"rror" not in done.stderr, done.stderr  # a warning may come
    assert done.stdout.decode("utf-8").split("\n")[:-1] == want


def test_arguments_are_utf8_whatever_the_locale(tiny_translator_files, loaded, tmp_path) -> None:
    want = translate_lines(loaded, NON_ASCII, GREEDY, max_pieces=from_params(Params).train.max_len)
    done = translate_bytes(tiny_translator_files, tmp_path, NON_ASCII, b"", NOT_UTF8_LOCALES["C, ascii"])
    assert done.returncode == 0 and b"rror" not in done.stderr, done.stderr  # a warning may come
    assert done.stdout.decode("utf-8").split("\n")[:-1] == want


def test_help_says_the_text_is_utf8() -> None:
    assert "UTF-8 whatever the locale" in " ".join(parser().format_help().split())


def test_ensemble_takes_one_checkpoint_per_flag_and_leaves_the_sentences(
    tiny_translator_files, loaded, capsys
) -> None:
    ckpt = str(tiny_translator_files["ckpt"])
    args = parser().parse_args(["--ensemble", "a.pt", "A dog runs.", "--ensemble", "b.pt"])
    assert args.ensemble == [Path("a.pt"), Path("b.pt")] and args.sentences == ["A dog runs."]
    cli(tiny_translator_files, "--ensemble", ckpt, "A man walks in the park.")
    want = translate_lines(loaded, ["A man walks in the park."], CFG)  # an ensemble of one model twice
    assert capsys.readouterr().out.split("\n")[:-1] == want


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs Linux's /dev/full")
def test_a_full_disk_on_stdout_is_one_line_and_exit_1(tiny_translator_files, tmp_path) -> None:
    with open("/dev/full", "wb") as full:
        done = translate_bytes(
            tiny_translator_files,
            tmp_path,
            [],
            b"A dog walks.\n" * 300,
            {},
            stdout=full,
            stderr=subprocess.PIPE,
        )
    assert done.returncode == 1
    assert done.stderr.decode() == "error: standard output: cannot be written (No space left on device)\n"


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("stderr_is_a_terminal", [True, False])
def test_a_progress_line_only_when_stderr_is_a_terminal(
    tiny_translator_files, monkeypatch, stderr_is_a_terminal: bool
) -> None:
    err = Terminal() if stderr_is_a_terminal else io.StringIO()
    monkeypatch.setattr("sys.stdin", io.StringIO("A dog walks.\n" * 3))
    monkeypatch.setattr("sys.stdout", io.StringIO())
    monkeypatch.setattr("sys.stderr", err)
    cli(tiny_translator_files)
    assert len(sys.stdout.getvalue().split("\n")) == 4
    assert ("mt-translate: 3 lines" in err.getvalue()) == stderr_is_a_terminal
    assert stderr_is_a_terminal or err.getvalue() == ""
