"""Multi30k Task 1 (English to German, French or Czech): fetch the checksum-pinned raw files,
validate them, store a DatasetDict. Sources are tried in order, each a local folder or a base URL
holding `<split>.<lang>.gz` (URLs through pooch: hash check, retries); every file is checked against
its pinned SHA-256. The result is built in a temp folder beside the output and renamed into place
only when every check has passed, so a failure leaves nothing partial behind.
"""

from __future__ import annotations

import gzip
import os
import shutil
import tempfile
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path

import pooch
from datasets import Dataset, DatasetDict, load_from_disk

from pipeline.core.errors import DataError
from pipeline.data.languages import SOURCE, TARGETS

CANONICAL_BASE_URL = (
    "https://raw.githubusercontent.com/multi30k/dataset/"
    "a3d2e0d26b56f3846f66a952536ffed4e401d05a/data/task1/raw"
)
MIRROR_ENV = "MULTI30K_MIRROR"
SRC_LANG = SOURCE.code
TGT_LANGS = tuple(TARGETS)  # `download.tgt_lang`
LANG_NAMES = {code: lang.name for code, lang in TARGETS.items()}
EXPECTED_COUNTS: dict[str, int] = {  # sentence pairs per split
    "train": 29_000,
    "val": 1_014,
    "test_2016_flickr": 1_000,
    "test_2017_flickr": 1_000,
}
SPLITS = tuple(EXPECTED_COUNTS)
TRAIN_SPLIT = "train"
MISSING_SPLITS = {code: lang.missing_splits for code, lang in TARGETS.items() if lang.missing_splits}
SHA256: dict[str, str] = {  # the files at CANONICAL_BASE_URL's commit
    "train.en.gz": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    "train.de.gz": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
    "val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
    "val.de.gz": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    "test_2016_flickr.en.gz": "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
    "test_2016_flickr.de.gz": "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
    "test_2017_flickr.en.gz": "76a444ee25172e72695cddb13ae4a3bda59430617be88e0bb46b60504f054074",
    "test_2017_flickr.de.gz": "a2c89666db00c495cd8513b9d708d5a3acc205d7de312ef2bf5fb7ebc1540aee",
    "train.fr.gz": "622e75069e9f4c577425c4f277116ce66e63a2401c0a2312d90073cb12379a3c",
    "val.fr.gz": "ca3106f1a72390591d25f6c45cb4cd39dec4cd3f123e099748a3ce5256c160e9",
    "test_2016_flickr.fr.gz": "6d326e188d259fb1d04ac19eae3af956559b3a0b93d7635e56c90987c40c8b90",
    "test_2017_flickr.fr.gz": "3ba671ceb2299f3304ffafefea7a833d08632fbaf0ba18546f8a2ec2391af496",
    "train.cs.gz": "a65adb8b32e3bc664f21ecba7a6e7f6950fd1f405e135f7c312faabdb6255077",
    "val.cs.gz": "b63226e05c4bd5dd6a42897d74b86a1b9d2c31498252c572b1ea7f7996927fcc",
    "test_2016_flickr.cs.gz": "200a4a74cc9560f051924abb9803be008d1908d77f747e9141aeb86dfd2797f1",
}
URL_RETRIES = 3


def split_counts(tgt_lang: str = "de") -> dict[str, int]:
    """Expected pairs of the splits Multi30k has for EN→`tgt_lang` (Czech lacks test_2017_flickr)."""
    missing = MISSING_SPLITS.get(tgt_lang, ())
    return {split: n for split, n in EXPECTED_COUNTS.items() if split not in missing}


def corpus_files(tgt_lang: str = "de") -> dict[str, str]:
    """File name → pinned SHA-256 of every raw file the EN→`tgt_lang` corpus is built from."""
    return {
        file_name(s, lang): SHA256[file_name(s, lang)]
        for s in split_counts(tgt_lang)
        for lang in (SRC_LANG, tgt_lang)
    }


def file_name(split: str, lang: str) -> str:
    """Raw file name of one side of a split, e.g. `train.en.gz`."""
    return f"{split}.{lang}.gz"


def resolve_sources(config_mirror: str | None) -> list[str]:
    """Sources to try in order: the mirror (env `MULTI30K_MIRROR` wins over params), then the canonical URL.

    A relative mirror folder is taken relative to the current working directory.
    """
    mirror = os.environ.get(MIRROR_ENV) or config_mirror
    if mirror and "://" not in mirror:
        mirror = os.path.abspath(mirror)  # the same folder after a later change of directory
    return [mirror, CANONICAL_BASE_URL] if mirror else [CANONICAL_BASE_URL]


def _is_url(source: str) -> bool:
    return source.split("://", 1)[0] in ("http", "https", "ftp")


def _fetch_from(source: str, name: str, sha256: str, dest_dir: Path) -> Path:
    """Copy (folder) or download (URL, via pooch) `name` into `dest_dir` and check its SHA-256.

    Raises:
        ValueError: the file's SHA-256 is not `sha256`.
        OSError / requests errors: the file could not be read or downloaded.
    """
    if _is_url(source):
        fetcher = pooch.create(
            path=dest_dir,
            base_url=source.rstrip("/") + "/",
            registry={name: f"sha256:{sha256}"},
            retry_if_failed=URL_RETRIES,
        )
        return Path(fetcher.fetch(name))
    target = dest_dir / name
    shutil.copyfile(Path(source) / name, target)
    got = pooch.file_hash(str(target), alg="sha256")
    if got != sha256:
        target.unlink()
        raise ValueError(f"SHA-256 {got[:12]}… does not match the pinned {sha256[:12]}…")
    return target


def fetch_file(name: str, sha256: str, sources: Sequence[str], dest_dir: Path) -> Path:
    """Fetch one raw file from the first source that yields a copy with the pinned SHA-256.

    Raises:
        DataError: no source gave a valid copy (one line naming the file and each source's failure).
    """
    failures = []
    for source in sources:
        try:
            return _fetch_from(source, name, sha256, dest_dir)
        except Exception as exc:  # noqa: BLE001 - any failure (I/O, network, checksum): try the next source
            reason = " ".join(str(exc).split()) or type(exc).__name__
            failures.append(f"{source}: {reason}")
    raise DataError(f"{name}: no valid copy found ({'; '.join(failures)})")


def read_lines(path: Path) -> list[str]:
    """Read a gzipped UTF-8 text file into lines, each without its trailing newline or carriage return.

    Raises:
        DataError: the gzip stream is corrupt or truncated, a line is not UTF-8, or a line is empty.
    """
    try:
        with gzip.open(path, "rb") as f:
            raw = f.read()
    except (OSError, EOFError, zlib.error) as exc:
        raise DataError(f"{path.name}: corrupt or truncated gzip ({exc})") from None
    chunks = raw.split(b"\n")
    if chunks and chunks[-1] == b"":
        chunks.pop()  # the final newline ends the last line; it does not start a new one
    lines = []
    for number, chunk in enumerate(chunks, start=1):
        try:
            line = chunk.decode("utf-8").rstrip("\r")
        except UnicodeDecodeError as exc:
            raise DataError(f"{path.name}: line {number}: not valid UTF-8 ({exc.reason})") from None
        if not line.strip():
            raise DataError(f"{path.name}: line {number}: empty line")
        lines.append(line)
    return lines


def read_split(raw_dir: Path, split: str, expected: int, tgt_lang: str = "de") -> dict[str, list[str]]:
    """Read both sides of a split (`en`, `tgt_lang`) and check each has `expected` lines.

    Raises:
        DataError: a file is unreadable (see `read_lines`), or the two sides' line counts differ
            from each other or from `expected`.
    """
    sides = {lang: read_lines(raw_dir / file_name(split, lang)) for lang in (SRC_LANG, tgt_lang)}
    n_en, n_tgt = len(sides[SRC_LANG]), len(sides[tgt_lang])
    if n_en != n_tgt:
        raise DataError(
            f"{file_name(split, tgt_lang)}: {n_tgt} lines but {file_name(split, 'en')} has {n_en}"
        )
    if n_en != expected:
        raise DataError(f"{file_name(split, 'en')}: {n_en} lines, expected {expected}")
    return sides


def _truncate(sides: dict[str, list[str]], limit: int | None) -> dict[str, list[str]]:
    return sides if limit is None else {lang: lines[:limit] for lang, lines in sides.items()}


def build_corpus(
    out_dir: str | Path,
    sources: Sequence[str],
    *,
    sha256: Mapping[str, str] = SHA256,
    counts: Mapping[str, int] | None = None,
    max_train_pairs: int | None = None,
    max_eval_pairs: int | None = None,
    tgt_lang: str = "de",
) -> DatasetDict:
    """Fetch, validate and store the corpus as a DatasetDict (columns `en` and `tgt_lang`) at `out_dir`.

    `counts` maps split → expected pairs (default: `split_counts(tgt_lang)`, the splits Multi30k
    has for that language) and `sha256` maps file name → pinned sum. After all
    checks pass, train keeps its first `max_train_pairs` pairs and every other split its first
    `max_eval_pairs` (None = all). The raw files are fetched into a temp folder beside `out_dir`
    and deleted afterwards.

    Raises:
        DataError: a file could not be fetched or failed validation (`out_dir` is left as it was).
    """
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    counts = split_counts(tgt_lang) if counts is None else counts
    with tempfile.TemporaryDirectory(dir=out_dir.parent, prefix=f".{out_dir.name}.raw.") as raw:
        raw_dir = Path(raw)
        for split in counts:
            for lang in (SRC_LANG, tgt_lang):
                name = file_name(split, lang)
                fetch_file(name, sha256[name], sources, raw_dir)
        splits = {split: read_split(raw_dir, split, n, tgt_lang) for split, n in counts.items()}
    corpus = DatasetDict(
        {
            split: Dataset.from_dict(
                _truncate(sides, max_train_pairs if split == TRAIN_SPLIT else max_eval_pairs)
            )
            for split, sides in splits.items()
        }
    )
    save_dataset_dict(corpus, out_dir)
    return corpus


def skipped_splits(tgt_lang: str) -> list[str]:
    """One message per evaluation split Multi30k lacks for `tgt_lang` (printed by every stage that
    skips it); [] for German and French."""
    return [
        f"{split}: skipped, Multi30k has no {LANG_NAMES[tgt_lang]} references for it"
        for split in MISSING_SPLITS.get(tgt_lang, ())
    ]


def save_dataset_dict(dataset: DatasetDict, out_dir: str | Path) -> None:
    """`save_to_disk` into a temp folder beside `out_dir`, then replace `out_dir` with it."""
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=out_dir.parent, prefix=f".{out_dir.name}."))
    try:
        dataset.save_to_disk(str(work / "dataset"))
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.replace(work / "dataset", out_dir)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def load_corpus(path: str | Path) -> DatasetDict:
    """Load a DatasetDict saved by `save_dataset_dict`: the corpus (the splits of `split_counts`,
    columns `en` and the target language) or the warm-up data.

    Raises:
        DataError: `path` does not hold a saved DatasetDict (run the stage that writes it).
    """
    path = Path(path)
    if not (path / "dataset_dict.json").is_file():
        raise DataError(f"{path}: no saved DatasetDict here (run the stage that writes it)")
    return load_from_disk(str(path))
