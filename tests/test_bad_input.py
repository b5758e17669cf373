"""Bad input, table-driven: each case must end in ONE line `error: ...` naming the culprit, a
non-zero exit, and nothing written. Entry points run in-process through `run_main`, exactly as
their `__main__` does, so exit codes and stderr are what a user sees.

Corpus cases build tiny gzip files with their own checksums; checkpoint and translate cases use
a tiny random model and a tiny SentencePiece model built once per session.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from from_params import BILLION_LAUGHS, from_params, write_changed_params
from tiny_translator import model_flags
from toy_train import pairs, toy_run

from pipeline.core.config import ModelConfig, Params, TokenizerConfig
from pipeline.core.errors import Stopped, run_main
from pipeline.core.params_file import SHIPPED_PARAMS
from pipeline.data.multi30k import build_corpus
from pipeline.data.tokenizer import Tokenizer, model_sha256, train_tokenizer
from pipeline.model.transformer import Transformer
from pipeline.ops.cli import main as translate_main
from pipeline.training import checkpoint
from pipeline.training import loop as train_module

REPO = Path(__file__).resolve().parents[1]
GOOD_EN = ["A dog runs.", "Two men talk.", "A girl sings."]
GOOD_DE = ["Ein Hund rennt.", "Zwei Männer reden.", "Ein Mädchen singt."]


# ---- fixtures: a tiny tokenizer and model ------------------------------------------------
SPM_LINES = [f"{e} {d}" for e in GOOD_EN for d in GOOD_DE] * 20 + ["the cat sat on the mat with a hat"] * 50


@pytest.fixture(scope="session")
def random_translator_files(tmp_path_factory) -> dict[str, Path]:
    """{"spm": a tiny SentencePiece model, "ckpt": a tiny untrained (random) Transformer's
    checkpoint, "defaults": a copy of the repository's params.yaml}. Read-only."""
    root = tmp_path_factory.mktemp("random_translator")
    spm = train_tokenizer(SPM_LINES, root / "spm", from_params(TokenizerConfig, vocab_size=60))
    tok = Tokenizer.load(spm)
    torch.manual_seed(0)
    cfg = from_params(ModelConfig, d_model=16, n_heads=2, n_layers=1, d_ff=32)
    model = Transformer(cfg, tok.vocab_size, tok.pad_id)
    state = {"model": model.state_dict(), "model_cfg": cfg.model_dump(), "vocab_size": tok.vocab_size}
    state |= {"pad_id": tok.pad_id, "bos_id": tok.bos_id, "eos_id": tok.eos_id}
    checkpoint.save(root / "model.pt", state)
    (root / "defaults.yaml").write_text(SHIPPED_PARAMS.read_text(encoding="utf-8"), encoding="utf-8")
    return {"spm": spm, "ckpt": root / "model.pt", "defaults": root / "defaults.yaml"}


def run_entry(fn: Callable[[], None], capsys) -> tuple[int, str, str]:
    """Run an entry point like its __main__ does; returns (exit code, stdout, stderr)."""
    try:
        run_main(fn)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out = capsys.readouterr()
    return code, out.out, out.err


# ---- params.yaml: each rule is tested in test_config.py; here, what a stage makes of a bad file ----
@pytest.mark.parametrize(
    ("change", "message"),
    [
        (None, "file not found"),
        ("train:\n  optim:\n    peak_lrr: 0.1\n", "train.optim.peak_lrr: Extra inputs are not permitted"),
    ],
    ids=["missing", "typo"],
)
def test_a_bad_params_file_stops_a_stage_in_one_line_before_it_writes(
    change, message, tmp_path, monkeypatch, capsys
):
    from stages.warmup_data import main as warmup_data_main

    monkeypatch.chdir(tmp_path)
    if change is not None:
        write_changed_params(tmp_path / "params.yaml", change)
    code, _, err = run_entry(warmup_data_main, capsys)
    assert code == 1 and err == f"error: params.yaml: {message}\n"
    assert [p.name for p in tmp_path.iterdir()] == ([] if change is None else ["params.yaml"])


@pytest.mark.parametrize(
    ("stage", "field", "victim"),
    [("download", "download.out_dir", "train.arrow"), ("train", "train.out_dir", "step0000999.pt")],
)
def test_an_output_outside_the_checkout_is_refused_before_anything_is_removed(
    stage, field, victim, tmp_path, monkeypatch, capsys
):
    """A stage replaces its output folder (and train removes old step checkpoints): a path outside
    the checkout is refused in one line before the stage touches it."""
    checkout, outside = tmp_path / "checkout", tmp_path / "someone_else"
    checkout.mkdir()
    outside.mkdir()
    (outside / victim).write_text("not ours\n")
    section, key = field.split(".")
    change = {section: {key: str(outside)}}
    if stage == "train":
        change["train"]["model_file"] = str(outside / "model.pt")
    write_changed_params(checkout / "params.yaml", change)
    monkeypatch.chdir(checkout)
    main = {"download": "stages.download", "train": "stages.train"}[stage]
    code, _, err = run_entry(__import__(main, fromlist=["main"]).main, capsys)
    assert code == 1
    assert err == (
        f"error: params.yaml: {field}: {outside} lies outside the checkout {checkout} (stages delete and "
        "rewrite their outputs: only paths inside it are allowed)\n"
    )
    assert (
        sorted(p.name for p in outside.iterdir()) == [victim]
        and (outside / victim).read_text() == "not ours\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "checkout",
        "someone_else",
    ]  # no `.x.resume` beside it


ENTRIES = {  # the entry points that import pipeline.serving.translator
    "decode": ["-m", "stages.decode"],
    "distill": ["-m", "stages.distill"],
    "mt-translate": ["-m", "pipeline", "translate", "A dog."],
}


@pytest.fixture(scope="module")
def code_copy(tmp_path_factory) -> Path:
    """A copy of the code whose shipped params.yaml is, as in the repository, a link to its own."""
    root = tmp_path_factory.mktemp("code_copy")
    for package in ("pipeline", "stages"):
        shutil.copytree(
            REPO / package, root / package, symlinks=True, ignore=shutil.ignore_patterns("__pycache__")
        )
    return root


@pytest.mark.slow
@pytest.mark.parametrize(
    ("entry", "bad"),
    [("decode", "typo"), ("distill", "typo"), ("mt-translate", "typo"), ("mt-translate", "alias bomb")],
)
def test_a_bad_params_file_is_one_line_from_every_entry_point(entry, bad, code_copy):
    """The translator module read the shipped params.yaml when imported: a typo in it was a traceback."""
    params = code_copy / "params.yaml"
    if bad == "typo":
        write_changed_params(params, {"decode": {"beam_sise": 5}})
        reason = "decode.beam_sise: Extra inputs are not permitted"
    else:
        params.write_text(BILLION_LAUGHS + SHIPPED_PARAMS.read_text(encoding="utf-8"), encoding="utf-8")
        reason = "lol: Extra inputs are not permitted"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, *ENTRIES[entry]], cwd=code_copy, env=env, capture_output=True, text=True, timeout=120
    )
    where = params if entry == "mt-translate" else "params.yaml"  # mt-translate names the checkout's file
    assert (done.returncode, done.stdout, done.stderr) == (1, "", f"error: {where}: {reason}\n")


# ---- corpus files -----------------------------------------------------------------------------
def gz(lines: list[str] | bytes) -> bytes:
    raw = lines if isinstance(lines, bytes) else "".join(line + "\n" for line in lines).encode()
    return gzip.compress(raw, mtime=0)


CORPUS_CASES = {  # name: (breakage, re-pin the broken file's sum so content checks run, culprit)
    "missing file": (lambda f: f.pop("tiny.de.gz"), False, "tiny.de.gz"),
    "checksum mismatch": (
        lambda f: f.update({"tiny.de.gz": gz(GOOD_DE[:2] + ["Ein Kind."])}),
        False,
        "tiny.de.gz",
    ),
    "line counts differ": (lambda f: f.update({"tiny.de.gz": gz(GOOD_DE[:2])}), True, "tiny.de.gz"),
    "truncated gz": (lambda f: f.update({"tiny.de.gz": gz(GOOD_DE)[:-12]}), True, "tiny.de.gz"),
    "non-UTF-8 byte": (
        lambda f: f.update({"tiny.de.gz": gz(b"Ein Hund.\nZwei \xff.\nEin.\n")}),
        True,
        "line 2",
    ),
    "empty line": (lambda f: f.update({"tiny.de.gz": gz(["Ein Hund rennt.", "", "Ein."])}), True, "line 2"),
}


@pytest.mark.parametrize("breakage,resum,culprit", CORPUS_CASES.values(), ids=CORPUS_CASES.keys())
def test_bad_corpus(breakage, resum, culprit, tmp_path, capsys):
    files = {"tiny.en.gz": gz(GOOD_EN), "tiny.de.gz": gz(GOOD_DE)}
    sums = {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}
    breakage(files)
    if resum:
        sums["tiny.de.gz"] = hashlib.sha256(files["tiny.de.gz"]).hexdigest()
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    for name, data in files.items():
        (mirror / name).write_bytes(data)
    out = tmp_path / "out" / "corpus"
    code, _, err = run_entry(
        lambda: build_corpus(out, [str(mirror)], sha256=sums, counts={"tiny": 3}), capsys
    )
    assert code != 0 and err.count("\n") == 1 and err.startswith("error: ") and culprit in err
    assert "tiny.de.gz" in err
    assert not out.parent.exists() or not any(out.parent.iterdir())


# ---- checkpoints and translate -------------------------------------------------------------
def translate(files: dict, capsys, *args: str, ckpt: Path | None = None) -> tuple[int, str, str]:
    argv = [
        "--checkpoint",
        str(ckpt or files["ckpt"]),
        "--spm",
        str(files["spm"]),
        "--params",
        str(files["defaults"]),
    ]
    return run_entry(lambda: translate_main([*argv, "--beam-size", "2", *args]), capsys)


def broken_checkpoint(files: dict, kind: str, tmp: Path) -> Path:
    path = tmp / f"{kind}.pt"
    good = files["ckpt"].read_bytes()
    state = checkpoint.load(files["ckpt"])
    if kind == "corrupt":
        path.write_bytes(os.urandom(2000))
    elif kind == "truncated":
        path.write_bytes(good[: len(good) // 2])
    elif kind == "other vocabulary":
        cfg = ModelConfig.model_validate(state["model_cfg"])
        state |= {"vocab_size": 99, "model": Transformer(cfg, 99, 0).state_dict()}
        torch.save(state, path)
    elif kind == "other architecture":
        state["model_cfg"] = {**state["model_cfg"], "d_model": 32, "n_heads": 2}
        torch.save(state, path)
    return path


CHECKPOINT_CASES = {
    "corrupt": "corrupt or truncated",
    "truncated": "corrupt or truncated",
    "other vocabulary": "does not match the tokenizer",
    "other architecture": "do not fit the model config",
}


@pytest.mark.parametrize("kind,culprit", CHECKPOINT_CASES.items(), ids=CHECKPOINT_CASES.keys())
def test_bad_checkpoint(kind, culprit, random_translator_files, tmp_path, capsys):
    path = broken_checkpoint(random_translator_files, kind, tmp_path)
    code, out, err = translate(random_translator_files, capsys, "A dog runs.", ckpt=path)
    assert code != 0 and out == "" and err.count("\n") == 1
    assert err.startswith(f"error: {path}: ") and culprit in err


def test_checkpoint_of_another_tokenizer_of_the_same_size(random_translator_files, tmp_path, capsys):
    """A checkpoint records its tokenizer's SHA-256: another spm.model with the same size and
    special ids is refused; a checkpoint without the record (an older one) loads unchecked."""
    size = Tokenizer.load(random_translator_files["spm"]).vocab_size
    other = train_tokenizer(
        SPM_LINES, tmp_path / "bpe", from_params(TokenizerConfig, vocab_size=size, model_type="bpe")
    )
    assert Tokenizer.load(other).vocab_size == size  # only the fingerprint tells them apart
    state, digest = (
        checkpoint.load(random_translator_files["ckpt"]),
        model_sha256(random_translator_files["spm"]),
    )
    stamped = checkpoint.save(tmp_path / "stamped.pt", state, digest)
    assert translate(random_translator_files, capsys, "A dog runs.", ckpt=stamped)[0] == 0
    defaults = str(random_translator_files["defaults"])
    argv = ["--checkpoint", str(stamped), "--spm", str(other), "--params", defaults]
    code, out, err = run_entry(lambda: translate_main([*argv, "A dog runs."]), capsys)
    assert code != 0 and out == "" and err.count("\n") == 1
    assert err.startswith(
        f"error: {stamped}: trained with another tokenizer than {other} (spm.model SHA-256 "
    )
    assert f"SHA-256 {digest[:12]}…, this file {model_sha256(other)[:12]}…)" in err
    unstamped = [*argv[:1], str(random_translator_files["ckpt"]), *argv[2:]]
    assert run_entry(lambda: translate_main([*unstamped, "A dog runs."]), capsys)[0] == 0


def test_missing_checkpoint(random_translator_files, tmp_path, capsys):
    code, _, err = translate(random_translator_files, capsys, "A dog.", ckpt=tmp_path / "nope.pt")
    assert code != 0 and err == f"error: {tmp_path / 'nope.pt'}: checkpoint not found\n"


def test_no_trained_model_says_how_to_get_one(random_translator_files, tmp_path, capsys, monkeypatch):
    """Without --checkpoint and before `dvc repro`: the default model file is absent."""
    params = tmp_path / "params.yaml"
    params.write_text(random_translator_files["defaults"].read_text())
    argv = ["--spm", str(random_translator_files["spm"]), "--params", str(params), "A dog."]
    code, out, err = run_entry(lambda: translate_main(argv), capsys)
    model = tmp_path / from_params(Params).train.model_file
    assert code != 0 and out == ""
    assert (
        err
        == f"error: {model}: no trained model yet: run `dvc repro` to train it, or `dvc pull` to fetch it\n"
    )


@pytest.mark.parametrize(
    ("where", "culprit"),
    [
        ("missing/dir/a.png", "the folder {tmp}/missing/dir does not exist"),
        (".", "is a folder, not a PNG file name"),
        ("/dev/null", "not a regular file"),
        ("/proc/a.png", "cannot be written"),
        ("/sys/a.png", "cannot be written"),
        ("x" * 300 + ".png", "cannot be written (File name too long)"),
    ],
)
def test_attention_path_is_checked_before_translating(
    where, culprit, random_translator_files, tmp_path, capsys
):
    path = tmp_path / where if not where.startswith("/") else Path(where)
    code, out, err = translate(random_translator_files, capsys, "A dog.", "--attention", str(path))
    assert code != 0 and out == "" and err.count("\n") == 1
    assert err.startswith(f"error: --attention {path}: ") and culprit.format(tmp=tmp_path) in err
    assert not (tmp_path / "missing").exists() and list(tmp_path.glob("*.png")) == []


def test_bad_beam_flag(random_translator_files, capsys):
    code, out, err = translate(random_translator_files, capsys, "A dog.", "--beam-size", "0")
    assert code != 0 and out == "" and err.startswith("error: --beam-size: ") and err.count("\n") == 1


def test_beam_flag_above_its_bound(random_translator_files, capsys):
    code, out, err = translate(random_translator_files, capsys, "A dog.", "--beam-size", "9000")
    assert code != 0 and out == ""
    assert err == "error: --beam-size: Input should be less than or equal to 100\n"


@pytest.mark.parametrize(
    ("flag", "value", "bound"),
    [
        ("--length-penalty", "5000", "10"),
        ("--max-len-a", "1e308", "10"),
        ("--batch-size", "1000000000", "100000"),
    ],
)
def test_a_search_flag_beyond_its_range_is_one_line(flag, value, bound, random_translator_files, capsys):
    """`--length-penalty 5000` overflowed the length penalty in the middle of the search."""
    code, out, err = translate(random_translator_files, capsys, "A dog.", flag, value)
    assert code == 1 and out == ""
    assert err == f"error: {flag}: Input should be less than or equal to {bound}\n"


def test_beam_wider_than_the_vocabulary(random_translator_files, tmp_path, capsys):
    size = Tokenizer.load(random_translator_files["spm"]).vocab_size
    code, out, err = translate(random_translator_files, capsys, "A dog.", "--beam-size", str(size - 1))
    assert code != 0 and out == ""
    wide = f"beam size {size - 1} exceeds the vocabulary size {size} less pad and bos"
    assert err == f"error: --beam-size: {wide}\n"
    params = tmp_path / "wide_beam.yaml"
    write_changed_params(params, {"decode": {"beam_size": size - 1}})
    argv = [
        *model_flags(random_translator_files),
        "--params",
        str(params),
        "A dog.",
    ]
    code, out, err = run_entry(lambda: translate_main(argv), capsys)
    assert code != 0 and out == "" and err == f"error: {params}: decode.beam_size: {wide}\n"


def test_missing_params_flag_file(random_translator_files, tmp_path, capsys):
    code, out, err = translate(
        random_translator_files, capsys, "A dog.", "--params", str(tmp_path / "nope.yaml")
    )
    assert code != 0 and out == "" and err == f"error: --params {tmp_path / 'nope.yaml'}: no such file\n"


def test_stdin_line_that_is_not_utf8(random_translator_files, capsys, monkeypatch):
    import io

    undecodable = b"A dog \xff runs.".decode("utf-8", "surrogateescape")  # how stdin delivers it
    monkeypatch.setattr("sys.stdin", io.StringIO(f"A dog runs.\n{undecodable}\n"))
    code, _, err = translate(random_translator_files, capsys)
    assert code != 0 and err == "error: stdin line 2: not UTF-8 text\n"


def test_stdin_not_utf8_under_a_strict_error_handler(random_translator_files, capsys, monkeypatch):
    """PYTHONIOENCODING=utf-8:strict: stdin would raise UnicodeDecodeError; still the one line."""
    import io

    raw = io.BytesIO(b"A dog runs.\nA dog \xff runs.\n")
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(raw, encoding="utf-8", errors="strict"))
    code, out, err = translate(random_translator_files, capsys)
    assert code != 0 and out == "" and err == "error: stdin line 2: not UTF-8 text\n"


def test_argument_that_is_not_utf8(random_translator_files, capsys):
    undecodable = b"A dog \xff runs.".decode("utf-8", "surrogateescape")  # how sys.argv delivers it
    code, out, err = translate(random_translator_files, capsys, "A dog runs.", undecodable)
    assert code != 0 and out == "" and err == "error: argument 2: not UTF-8 text\n"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only message")
def test_cuda_device_without_cuda(random_translator_files, capsys):
    code, out, err = translate(random_translator_files, capsys, "A dog.", "--device", "cuda")
    assert code != 0 and out == "" and err == "error: --device cuda: this PyTorch sees no CUDA device\n"


# Inputs that must translate (one output line per input line), never crash.
ODD_INPUTS = {
    "empty": ([""], lambda out: out == [""]),
    "whitespace only": (["   \t "], lambda out: out == [""]),
    "10x longer than training": ([" ".join(GOOD_EN * 40)], lambda out: len(out) == 1),
    "emoji and unknown characters": (["A dog 🐕 runs ∑ ☃."], lambda out: len(out) == 1),
}


@pytest.mark.parametrize("lines,check", ODD_INPUTS.values(), ids=ODD_INPUTS.keys())
def test_odd_translate_input(lines, check, random_translator_files, capsys):
    code, out, err = translate(random_translator_files, capsys, *lines)
    assert code == 0, err
    assert check(out.split("\n")[:-1])


def test_translate_saves_attention_png(random_translator_files, tmp_path, capsys):
    png = tmp_path / "attn.png"
    code, out, err = translate(random_translator_files, capsys, "", "A dog runs.", "--attention", str(png))
    assert code == 0, err
    assert out.count("\n") == 2 and out.startswith("\n")  # the empty line stays an empty line
    assert png.stat().st_size > 1000


def test_translate_reads_stdin(random_translator_files, capsys, monkeypatch):
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO("A dog runs.\n\nTwo men talk.\n"))
    code, out, err = translate(random_translator_files, capsys)
    assert code == 0, err
    assert len(out.split("\n")) == 4 and out.split("\n")[1] == ""


# ---- training -------------------------------------------------------------------------------
def test_nan_loss_stops_with_message_and_keeps_last_checkpoint(tmp_path, capsys, monkeypatch):
    toy_run(tmp_path, pairs(), max_steps=8)
    before = (tmp_path / "last.pt").read_bytes()
    step = train_module.train_step

    def poisoned_step(net, *args, **kwargs):  # the continued run's weights turn to nan
        with torch.no_grad():
            getattr(net, "module", net).src_embed.weight.fill_(float("nan"))
        return step(net, *args, **kwargs)

    monkeypatch.setattr(train_module, "train_step", poisoned_step)
    capsys.readouterr()
    code, _, err = run_entry(lambda: toy_run(tmp_path, pairs(), max_steps=16), capsys)
    assert code != 0 and err.count("error: ") == 1
    message = err[err.index("error: ") :].splitlines()[0]
    assert "loss is nan" in message and "last.pt" in message
    assert (tmp_path / "last.pt").read_bytes() == before


def test_a_run_stopped_by_a_signal_says_so_in_one_line_and_exits_128_plus_the_signal(capsys):
    def stopped():
        raise Stopped(signal.SIGTERM, "train: stopped by SIGTERM after step 7; last.pt saved")

    code, out, err = run_entry(stopped, capsys)
    assert (code, out, err) == (143, "", "train: stopped by SIGTERM after step 7; last.pt saved\n")
