"""New parallel data dropped into `data/incoming/`, validated, filtered and merged with Multi30k train.

An incoming file is `*.tsv`: UTF-8, one pair per line, `en<TAB><tgt>` with `<tgt>` the target
language (`download.tgt_lang`; German by default) (a leading byte-order mark and
`\\r\\n` line ends are accepted). Each line must have exactly two fields, neither empty nor holding a
control character; a field of invisible characters only (zero-width and other format characters,
spaces) counts as empty. One bad line rejects the whole run (`DataError` naming the file and line),
so nothing of a bad file is ever used. Files are read in name order; every other entry of the
folder (a directory or broken link named `*.tsv`, `NEW.TSV`, `notes.txt`; hidden files and a
README aside) is named in a warning on stderr (`ignored_entries`), so a misnamed file is not
silently left out.

Filtering, in order, per pair: a pair whose English side matches an English sentence of val or any
test split, or whose target side matches a target one, is dropped (no test leakage; matching is
on `key`: NFKC-normalised as SentencePiece normalises, case-folded, whitespace runs collapsed);
then a pair equal (same key) to a Multi30k train pair or to an earlier incoming pair is dropped.
The merged set is the Multi30k train split, untouched and in order, followed by the pairs kept:
with no incoming files it is exactly the train split, and the output is byte-for-byte
deterministic, so DVC sees the same hash and reruns nothing downstream.

The merged set is written as JSON Lines (`{"en": ..., "<tgt>": ...}` per line; JSON, not TSV, because
one Multi30k train sentence holds a tab); `read_merged` loads it.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pipeline.core.errors import DataError
from pipeline.core.io import write_text
from pipeline.data.placeholders import protect_pair

PATTERN = "*.tsv"
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
    """The `*.tsv` files directly in `folder`, sorted by name (hidden files ignored); [] when the
    folder is absent."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.glob(PATTERN) if p.is_file() and not p.name.startswith("."))


def ignored_entries(folder: str | Path) -> list[tuple[Path, str]]:
    """The entries of `folder` that `incoming_files` leaves out, each with why, in name order;
    hidden entries (`.gitkeep`, editors' files) and the folder's README (`README`, `README.md`, ...)
    are not listed. [] when the folder is absent."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    used = set(incoming_files(folder))
    return [(p, _why_ignored(p)) for p in sorted(folder.iterdir()) if p not in used and not _unlisted(p)]


def _unlisted(path: Path) -> bool:
    return path.name.startswith(".") or path.name.split(".")[0].upper() == "README"


def _why_ignored(path: Path) -> str:
    if path.is_symlink() and not path.exists():
        return "a broken symbolic link"
    if path.is_dir():
        return "a directory"
    if not path.is_file():
        return "not a regular file"
    if path.suffix.lower() == PATTERN[1:]:
        return f"the name must end in {PATTERN[1:]}, lower case"
    return f"not a {PATTERN} file"


def _control_char(text: str) -> str | None:
    return next((c for c in text if unicodedata.category(c) == "Cc"), None)


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


def read_incoming(path: str | Path, tgt: str = "de") -> list[Pair]:
    """Every pair of one incoming file, validated (see `parse_line`).

    Raises:
        DataError: the file is unreadable, or a line is invalid (one line naming file and line).
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DataError(f"{path}: cannot read ({exc.strerror or exc})") from None
    chunks = data.removeprefix(b"\xef\xbb\xbf").split(b"\n")
    if chunks[-1] == b"":
        chunks.pop()  # the final newline ends the last line
    return [parse_line(chunk, f"{path}: line {n}", tgt) for n, chunk in enumerate(chunks, start=1)]


def key(text: str) -> str:
    """The matching key of a sentence: NFKC-normalised (SentencePiece's default normalisation, so
    text the tokenizer sees as equal matches: NFD and NFC, full-width forms), case-folded,
    whitespace runs collapsed."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def merge(
    train: Sequence[Pair], incoming: Iterable[Pair], held_out: Iterable[Pair]
) -> tuple[list[Pair], dict]:
    """Train pairs followed by the incoming pairs that neither leak nor repeat.

    `held_out` holds the (en, de) pairs of val and every test split. Returns (merged pairs, counts
    without `files`: pairs_read, dropped_leak, dropped_dup, added, train_pairs).
    """
    held = list(held_out)
    held_en, held_de = {key(en) for en, _ in held}, {key(de) for _, de in held}
    seen = {(key(en), key(de)) for en, de in train}
    merged, read, leaks, dups = list(train), 0, 0, 0
    for en, de in incoming:
        read += 1
        pair_key = (key(en), key(de))
        if pair_key[0] in held_en or pair_key[1] in held_de:
            leaks += 1
        elif pair_key in seen:
            dups += 1
        else:
            seen.add(pair_key)
            merged.append((en, de))
    counts = {"pairs_read": read, "dropped_leak": leaks, "dropped_dup": dups,
              "added": len(merged) - len(train), "train_pairs": len(merged)}  # fmt: skip
    return merged, counts


def merge_folder(
    folder: str | Path, train: Sequence[Pair], held_out: Iterable[Pair], tgt: str = "de"
) -> tuple[list[Pair], MergeCounts]:
    """Validate every incoming file of `folder` (`en<TAB><tgt>`; all before any is used), then `merge`.

    Raises:
        DataError: a file is invalid (see `read_incoming`).
    """
    files = incoming_files(folder)
    pairs = [pair for path in files for pair in read_incoming(path, tgt)]
    merged, counts = merge(train, pairs, held_out)
    return merged, MergeCounts(files=len(files), **counts)


def write_merged(path: str | Path, pairs: Iterable[Pair], tgt: str = "de") -> None:
    """Atomically write pairs as JSON Lines `{"en": ..., tgt: ...}` (deterministic bytes)."""
    lines = (json.dumps({"en": en, tgt: de}, ensure_ascii=False) + "\n" for en, de in pairs)
    write_text(path, "".join(lines))


def read_merged(path: str | Path, tgt: str = "de") -> tuple[list[str], list[str]]:
    """The (English, target) sentence lists of a merged training set written by `write_merged`.

    Raises:
        DataError: the file is missing (run the `incoming` stage) or a line is not a JSON object with
            string fields `en` and `tgt`.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: merged training set not found (run the incoming stage)")
    en, de = [], []
    lines = path.read_text(encoding="utf-8").split("\n")  # not splitlines(): U+2028 is text here
    for number, line in enumerate(lines[:-1] if lines[-1] == "" else lines, start=1):
        try:
            row = json.loads(line)
            en.append(str(row["en"]))
            de.append(str(row[tgt]))
        except (ValueError, KeyError, TypeError):
            raise DataError(f"{path}: line {number}: not a JSON object with fields en, {tgt}") from None
    return en, de


def read_training_set(path: str | Path, tgt: str = "de") -> tuple[list[str], list[str]]:
    """The merged training set with numbers protected by placeholders on both sides
    (`pipeline.data.placeholders.protect_pair`, number words of `tgt`), so the model learns to copy them.

    Raises:
        DataError: see `read_merged`.
    """
    pairs = [protect_pair(en, de, tgt_lang=tgt) for en, de in zip(*read_merged(path, tgt), strict=True)]
    return [en for en, _ in pairs], [de for _, de in pairs]
