"""New parallel data dropped into `data/incoming/` (`*.tsv`, `en<TAB><tgt>`), validated line by line,
filtered (pairs that leak val/test sentences, duplicates) and merged after Multi30k train into a
JSON Lines file, byte-for-byte deterministic; memory does not grow with the files' text. The
rules users see are in docs/retraining.md ("Incoming data").
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from pipeline.core.errors import DataError
from pipeline.core.io import atomic_path

PATTERN = "*.tsv"
BOM = b"\xef\xbb\xbf"
Pair = tuple[str, str]  # (en, target)


@dataclass(frozen=True)
class MergeCounts:
    """What one merge did (the stage's DVC metrics; numbers only)."""

    files: int  # incoming files read
    pairs_read: int  # valid lines in them
    dropped_leak: int  # a side matches a val/test sentence
    dropped_dup: int  # already in Multi30k train or earlier in incoming
    added: int  # new pairs appended to the train split
    train_pairs: int  # pairs in the merged set


def incoming_files(folder: str | Path) -> list[Path]:
    """The `*.tsv` files directly in `folder`, sorted by name (hidden files and symbolic links
    ignored); [] when the folder is absent."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    return sorted(
        p for p in folder.glob(PATTERN) if p.is_file() and not p.is_symlink() and not p.name.startswith(".")
    )


def broken_links(folder: str | Path) -> list[Path]:
    """The symbolic links in `folder` whose target does not exist or is a loop of links, sorted.

    At any depth, hidden ones too. DVC cannot hash a folder that holds one: `dvc status` and `dvc repro`
    stop with "unexpected error" naming it. [] when the folder is absent."""
    found = []
    for root, dirs, files in os.walk(folder):  # does not descend into linked directories
        found += [Path(root, name) for name in dirs + files if not Path(root, name).exists()]
    return sorted(found)


def ignored_entries(folder: str | Path) -> list[tuple[Path, str]]:
    """The entries of `folder` that `incoming_files` leaves out, each with why, in name order.

    Hidden entries (`.gitkeep`, editors' files) and the folder's README (`README`, `README.md`, ...) are
    not listed. [] when the folder is absent."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    used = set(incoming_files(folder))
    return [(p, _why_ignored(p)) for p in sorted(folder.iterdir()) if p not in used and not _unlisted(p)]


def _unlisted(path: Path) -> bool:
    return path.name.startswith(".") or path.name.split(".")[0].upper() == "README"


def _why_ignored(path: Path) -> str:
    if path.is_symlink():
        return "a symbolic link" if path.exists() else "a broken symbolic link"
    if path.is_dir():
        return "a directory"
    if not path.is_file():
        return "not a regular file"
    if path.suffix.lower() == PATTERN[1:]:
        return f"the name must end in {PATTERN[1:]}, lower case"
    return f"not a {PATTERN} file"


CONTROL_RE = re.compile("[\x00-\x1f\x7f-\x9f]")  # exactly Unicode category Cc


def _control_char(text: str) -> str | None:
    found = CONTROL_RE.search(text)
    return found.group() if found else None


# Unicode categories that show nothing: controls, format characters (U+200B, U+FEFF, ...), spaces
INVISIBLE = {"Cc", "Cf", "Zs", "Zl", "Zp"}


def _visible(text: str) -> bool:
    return any(unicodedata.category(c) not in INVISIBLE and not c.isspace() for c in text)


def parse_line(raw: bytes, where: str, tgt: str = "de") -> Pair:
    """One `en<TAB><tgt>` line (without its `\\n`) as a pair of stripped strings.

    Raises:
        DataError: not UTF-8, not exactly two tab-separated fields, an empty field (or one of
            invisible characters only), or a control character (message starts with `where`, e.g.
            `new.tsv: line 3`).
    """
    try:
        line = raw.decode("utf-8").removesuffix("\r")
    except UnicodeDecodeError as exc:
        raise DataError(f"{where}: not valid UTF-8 ({exc.reason})") from None
    if not line.strip():
        raise DataError(f"{where}: empty line")
    fields = line.split("\t")
    if len(fields) != 2:
        raise DataError(f"{where}: expected 2 tab-separated fields (en, {tgt}), got {len(fields)}")
    en, de = (field.strip() for field in fields)
    for name, text in (("en", en), (tgt, de)):
        if not text:
            raise DataError(f"{where}: empty {name} field")
        bad = _control_char(text)
        if bad is not None:
            raise DataError(f"{where}: control character U+{ord(bad):04X} in the {name} field")
        if not _visible(text):
            raise DataError(f"{where}: empty {name} field (invisible characters only)")
    return en, de


def iter_incoming(path: str | Path, tgt: str = "de") -> Iterator[Pair]:
    """The pairs of one incoming file, read and validated a line at a time (see `parse_line`).

    Blank lines at the end of the file are ignored (an editor's trailing newline); a blank line before
    another pair is an error.

    Raises:
        DataError: the file is unreadable, or a line is invalid (one line naming file and line).
    """
    path = Path(path)
    try:
        with path.open("rb") as f:
            blank = None  # the first blank line since the last pair
            for number, raw in enumerate(f, start=1):
                raw = raw.removesuffix(b"\n").removeprefix(BOM if number == 1 else b"")
                if not raw.strip():
                    blank = blank or number
                    continue
                if blank is not None:
                    raise DataError(f"{path}: line {blank}: empty line")
                yield parse_line(raw, f"{path}: line {number}", tgt)
    except OSError as exc:
        raise DataError(f"{path}: cannot read ({exc.strerror or exc})") from None


def key(text: str) -> str:
    """The matching key of a sentence: NFKC-normalised, case-folded, whitespace runs collapsed.

    NFKC is SentencePiece's default normalisation, so text the tokenizer sees as equal matches (NFD and
    NFC, full-width forms)."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def _digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode(), digest_size=16).digest()


class PairFilter:
    """Decides, pair by pair, what `merge` keeps, holding a 16-byte digest of each key rather than
    the sentences: the English and target keys of `held_out` (val and every test split) and the
    pair keys of `train` and of every pair admitted so far. `counts` says what it decided."""

    def __init__(self, train: Iterable[Pair], held_out: Iterable[Pair]) -> None:
        held = list(held_out)
        self.held_en = {_digest(key(en)) for en, _ in held}
        self.held_de = {_digest(key(de)) for _, de in held}
        self.seen = {_digest(key(en) + "\t" + key(de)) for en, de in train}  # keys hold no tab
        self.read = self.leaks = self.dups = self.added = 0

    def admit(self, en: str, de: str) -> bool:
        """True if the pair neither leaks a held-out sentence nor repeats a train or earlier pair."""
        self.read += 1
        en_key, de_key = key(en), key(de)  # the costly part (NFKC): once per sentence
        if _digest(en_key) in self.held_en or _digest(de_key) in self.held_de:
            self.leaks += 1
            return False
        pair = _digest(en_key + "\t" + de_key)
        if pair in self.seen:
            self.dups += 1
            return False
        self.seen.add(pair)
        self.added += 1
        return True

    def counts(self, n_train: int) -> dict:
        return {
            "pairs_read": self.read,
            "dropped_leak": self.leaks,
            "dropped_dup": self.dups,
            "added": self.added,
            "train_pairs": n_train + self.added,
        }


def merge(
    train: Sequence[Pair], incoming: Iterable[Pair], held_out: Iterable[Pair]
) -> tuple[list[Pair], dict]:
    """Train pairs followed by the incoming pairs that neither leak nor repeat (`PairFilter`).

    `held_out` holds the (en, de) pairs of val and every test split. Returns (merged pairs, counts
    without `files`: pairs_read, dropped_leak, dropped_dup, added, train_pairs).
    """
    keep = PairFilter(train, held_out)
    merged = list(train) + [(en, de) for en, de in incoming if keep.admit(en, de)]
    return merged, keep.counts(len(train))


def merge_folder(
    folder: str | Path, train: Sequence[Pair], held_out: Iterable[Pair], out_path: str | Path, tgt: str = "de"
) -> MergeCounts:
    """`merge` the incoming files of `folder` (`en<TAB><tgt>`, read in name order, a line at a
    time) into `out_path` as `write_merged` writes it. Atomic: on any error nothing is written.

    Raises:
        DataError: a file is invalid (see `iter_incoming`).
    """
    files = incoming_files(folder)
    keep = PairFilter(train, held_out)
    with atomic_path(out_path) as tmp, tmp.open("w", encoding="utf-8", newline="\n") as out:
        out.writelines(merged_line(en, de, tgt) for en, de in train)
        for path in files:
            out.writelines(
                merged_line(en, de, tgt) for en, de in iter_incoming(path, tgt) if keep.admit(en, de)
            )
    return MergeCounts(files=len(files), **keep.counts(len(train)))


def merged_line(en: str, de: str, tgt: str = "de") -> str:
    """One line of the merged set: `{"en": ..., tgt: ...}` JSON and a newline."""
    return json.dumps({"en": en, tgt: de}, ensure_ascii=False) + "\n"


def write_merged(path: str | Path, pairs: Iterable[Pair], tgt: str = "de") -> int:
    """Atomically write pairs as JSON Lines `{"en": ..., tgt: ...}` (deterministic bytes), a line at a
    time as `pairs` yields them. Returns the pairs written.

    Raises:
        PipelineError: the disk filled up (the file is left as it was).
    """
    written = 0
    with atomic_path(path) as tmp, tmp.open("w", encoding="utf-8", newline="\n") as out:
        for en, de in pairs:
            out.write(merged_line(en, de, tgt))
            written += 1
    return written


def iter_merged(path: str | Path, tgt: str = "de") -> Iterator[Pair]:
    """The (English, target) pairs of a merged training set written by `write_merged`, a line at a
    time (lines end at `\\n` only: U+2028 is text here).

    Raises:
        DataError: the file is missing (run the `incoming` stage) or a line is not a JSON object with
            string fields `en` and `tgt`.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: merged training set not found (run the incoming stage)")
    with path.open("rb") as f:
        for number, line in enumerate(f, start=1):
            try:
                row = json.loads(line)
                pair = str(row["en"]), str(row[tgt])
            except (ValueError, KeyError, TypeError):
                raise DataError(f"{path}: line {number}: not a JSON object with fields en, {tgt}") from None
            yield pair


def read_merged(path: str | Path, tgt: str = "de") -> tuple[list[str], list[str]]:
    """The (English, target) sentence lists of a merged training set (see `iter_merged`)."""
    pairs = list(iter_merged(path, tgt))
    return [en for en, _ in pairs], [de for _, de in pairs]
