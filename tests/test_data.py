"""Fetching, validating and storing Multi30k: tiny generated fixtures, plus one run over the real mirror."""

from __future__ import annotations

import functools
import gzip
import hashlib
import http.server
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from from_params import write_changed_params

from pipeline.core.errors import DataError
from pipeline.data.multi30k import (
    CANONICAL_BASE_URL,
    EXPECTED_COUNTS,
    MIRROR_ENV,
    SHA256,
    build_corpus,
    corpus_files,
    load_corpus,
    resolve_sources,
)

MIRROR = Path(os.environ.get("MULTI30K_MIRROR", Path(__file__).resolve().parents[2] / "shared" / "multi30k"))
GOOD = {
    "train": (
        b"A man.\nTwo dogs run.\nA girl sings.\n",
        b"Ein Mann.\nZwei Hunde rennen.\nEin M\xc3\xa4dchen singt.\n",
    ),
    "val": (b"A cat.\r\nA car.\r\n", b"Eine Katze.\r\nEin Auto.\r\n"),
}
COUNTS = {"train": 3, "val": 2}


def write_source(folder: Path, contents: dict[str, tuple[bytes, bytes]]) -> dict[str, str]:
    """Write `<split>.<lang>.gz` files into `folder`; return their SHA-256 sums by file name."""
    folder.mkdir(parents=True, exist_ok=True)
    sums = {}
    for split, sides in contents.items():
        for lang, text in zip(("en", "de"), sides, strict=True):
            path = folder / f"{split}.{lang}.gz"
            path.write_bytes(gzip.compress(text, mtime=0))
            sums[path.name] = hashlib.sha256(path.read_bytes()).hexdigest()
    return sums


def leftovers(parent: Path) -> list[str]:
    """Everything in `parent` except the source folder: must be empty after a failed build."""
    return sorted(p.name for p in parent.iterdir() if p.name != "src")


def test_builds_and_loads_a_tiny_corpus(tmp_path: Path) -> None:
    sums = write_source(tmp_path / "src", GOOD)
    out = tmp_path / "data" / "multi30k"
    build_corpus(out, [str(tmp_path / "src")], sha256=sums, counts=COUNTS)
    corpus = load_corpus(out)
    assert list(corpus) == ["train", "val"]
    assert corpus["train"].column_names == ["en", "de"]
    assert corpus["train"][2] == {"en": "A girl sings.", "de": "Ein Mädchen singt."}
    assert list(corpus["val"]["de"]) == ["Eine Katze.", "Ein Auto."]  # "\r\n" stripped
    assert leftovers(tmp_path / "data") == ["multi30k"]  # no temp folders left


def test_max_pairs_keep_the_first_pairs(tmp_path: Path) -> None:
    sums = write_source(tmp_path / "src", GOOD)
    corpus = build_corpus(
        tmp_path / "out",
        [str(tmp_path / "src")],
        sha256=sums,
        counts=COUNTS,
        max_train_pairs=2,
        max_eval_pairs=1,
    )
    assert list(corpus["train"]["en"]) == ["A man.", "Two dogs run."]
    assert list(corpus["val"]["en"]) == ["A cat."]


def _wrong_sum(src: Path, sums: dict[str, str]) -> None:
    sums["val.de.gz"] = "0" * 64


def _short_file(src: Path, sums: dict[str, str]) -> None:
    sums.update(write_source(src, {"train": (GOOD["train"][0], b"Ein Mann.\nZwei Hunde rennen.\n")}))


def _wrong_count(src: Path, sums: dict[str, str]) -> None:
    sums.update(write_source(src, {"val": (b"A cat.\n", b"Eine Katze.\n")}))


def _bad_utf8(src: Path, sums: dict[str, str]) -> None:
    sums.update(write_source(src, {"train": (GOOD["train"][0], b"Ein Mann.\nZwei \xff Hunde.\nEin Kind.\n")}))


def _empty_line(src: Path, sums: dict[str, str]) -> None:
    sums.update(write_source(src, {"val": (b"A cat.\n\n", b"Eine Katze.\nEin Auto.\n")}))


def _truncated_gz(src: Path, sums: dict[str, str]) -> None:
    path = src / "train.en.gz"
    path.write_bytes(path.read_bytes()[:-12])
    sums[path.name] = hashlib.sha256(path.read_bytes()).hexdigest()


def _missing_file(src: Path, sums: dict[str, str]) -> None:
    (src / "val.en.gz").unlink()


@pytest.mark.parametrize(
    ("corrupt", "message"),
    [
        (_wrong_sum, r"val\.de\.gz: .*SHA-256"),
        (_short_file, r"train\.de\.gz: 2 lines but train\.en\.gz has 3"),
        (_wrong_count, r"val\.en\.gz: 1 lines, expected 2"),
        (_bad_utf8, r"train\.de\.gz: line 2: not valid UTF-8"),
        (_empty_line, r"val\.en\.gz: line 2: empty line"),
        (_truncated_gz, r"train\.en\.gz: corrupt or truncated gzip"),
        (_missing_file, r"val\.en\.gz: no valid copy found"),
    ],
)
def test_bad_input_is_a_data_error_and_writes_nothing(
    tmp_path: Path, corrupt: Callable[[Path, dict[str, str]], None], message: str
) -> None:
    src = tmp_path / "src"
    sums = write_source(src, GOOD)
    corrupt(src, sums)
    with pytest.raises(DataError, match=message) as info:
        build_corpus(tmp_path / "multi30k", [str(src)], sha256=sums, counts=COUNTS)
    assert "\n" not in str(info.value)
    assert leftovers(tmp_path) == []


def test_falls_back_to_the_next_source(tmp_path: Path) -> None:
    sums = write_source(tmp_path / "src", GOOD)
    broken = tmp_path / "broken"
    write_source(broken, {"val": (b"x\n", b"y\n")})  # wrong sums for val, train missing
    corpus = build_corpus(tmp_path / "out", [str(broken), str(tmp_path / "src")], sha256=sums, counts=COUNTS)
    assert corpus["val"].num_rows == 2


@pytest.fixture
def http_source(tmp_path: Path) -> Iterator[str]:
    """Serve `tmp_path / "src"` over HTTP on localhost; yield its base URL."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path / "src"))
    handler.log_message = lambda *args: None  # type: ignore[method-assign]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_fetches_from_a_url_mirror(tmp_path: Path, http_source: str, monkeypatch) -> None:
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    sums = write_source(tmp_path / "src", GOOD)
    corpus = build_corpus(tmp_path / "out", [http_source], sha256=sums, counts=COUNTS)
    assert corpus["train"].num_rows == 3


def test_url_with_wrong_sum_is_a_data_error(tmp_path: Path, http_source: str, monkeypatch) -> None:
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    monkeypatch.setattr("pipeline.data.multi30k.URL_RETRIES", 0)
    sums = write_source(tmp_path / "src", GOOD)
    sums["train.en.gz"] = "f" * 64
    with pytest.raises(DataError, match=r"train\.en\.gz: no valid copy found \(http://127\.0\.0\.1"):
        build_corpus(tmp_path / "out", [http_source], sha256=sums, counts=COUNTS)
    assert not (tmp_path / "out").exists()


def test_mirror_env_wins_over_params(monkeypatch, tmp_path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(MIRROR_ENV, raising=False)
    assert resolve_sources(None) == [CANONICAL_BASE_URL]
    assert resolve_sources("params/mirror") == [str(tmp_path / "params/mirror"), CANONICAL_BASE_URL]
    monkeypatch.setenv(MIRROR_ENV, "env/mirror")  # relative: to the directory the command ran in
    assert resolve_sources("params/mirror") == [str(tmp_path / "env/mirror"), CANONICAL_BASE_URL]
    monkeypatch.setenv(MIRROR_ENV, "https://example.org/m30k")
    assert resolve_sources(None) == ["https://example.org/m30k", CANONICAL_BASE_URL]


def test_load_corpus_missing_is_a_data_error(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="no saved DatasetDict"):
        load_corpus(tmp_path / "nothing")


needs_mirror = pytest.mark.skipif(not MIRROR.is_dir(), reason=f"no Multi30k mirror at {MIRROR}")


@needs_mirror
def test_real_mirror_counts(tmp_path: Path) -> None:
    corpus = build_corpus(tmp_path / "multi30k", [str(MIRROR)])
    assert {split: ds.num_rows for split, ds in corpus.items()} == EXPECTED_COUNTS
    assert {split: ds.num_rows for split, ds in corpus.items()} == {
        "train": 29000,
        "val": 1014,
        "test_2016_flickr": 1000,
        "test_2017_flickr": 1000,
    }
    assert corpus["train"][0]["en"] == "Two young, White males are outside near many bushes."


def test_other_targets_pin_every_file_and_czech_lacks_test_2017() -> None:
    assert set(SHA256) == set(corpus_files("de")) | set(corpus_files("fr")) | set(corpus_files("cs"))
    assert "test_2017_flickr.cs.gz" not in corpus_files("cs") and len(corpus_files("cs")) == 6


@needs_mirror
@pytest.mark.parametrize("lang", ["fr", "cs"])
def test_real_mirror_other_targets(lang: str, tmp_path: Path, capsys) -> None:
    """The pinned sums are those of the real files (build_corpus checks each), and a split the
    language lacks is skipped with a message, not an error."""
    from stages import download

    section = {"out_dir": "data/multi30k", "max_train_pairs": 5, "max_eval_pairs": 5, "tgt_lang": lang}
    write_changed_params(tmp_path / "params.yaml", {"download": section})
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp_path)
        mp.setenv(MIRROR_ENV, str(MIRROR))
        download.main()
    corpus = load_corpus(tmp_path / "data" / "multi30k")
    assert corpus["train"].column_names == ["en", lang]
    expected = ["train", "val", "test_2016_flickr"] + (["test_2017_flickr"] if lang == "fr" else [])
    assert list(corpus) == expected
    skipped = "download: test_2017_flickr: skipped, Multi30k has no Czech references for it"
    assert (skipped in capsys.readouterr().out) == (lang == "cs")


@needs_mirror
def test_download_stage_smoke_run(tmp_path: Path, monkeypatch) -> None:
    from stages import download

    section = {"out_dir": "data/multi30k", "max_train_pairs": 500, "max_eval_pairs": 100}
    write_changed_params(tmp_path / "params.yaml", {"download": section})
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(MIRROR_ENV, str(MIRROR))
    download.main()
    sizes = {split: ds.num_rows for split, ds in load_corpus(tmp_path / "data" / "multi30k").items()}
    assert sizes == {"train": 500, "val": 100, "test_2016_flickr": 100, "test_2017_flickr": 100}
