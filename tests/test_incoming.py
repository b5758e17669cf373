"""The incoming-data stage: validating `en<TAB>de` files, dropping leaks and duplicates, merging."""

from __future__ import annotations

import functools
import json
import unicodedata
from pathlib import Path

import pytest
from datasets import Dataset, DatasetDict
from from_params import write_changed_params

from pipeline.core.errors import DataError
from pipeline.data.incoming import (
    broken_links,
    ignored_entries,
    incoming_files,
    iter_incoming,
    merge,
    read_merged,
    write_merged,
)
from pipeline.data.multi30k import save_dataset_dict
from stages import incoming as stage

TRAIN = {
    "en": ["A man.", "Two dogs run.", "A girl sings."],
    "de": ["Ein Mann.", "Zwei Hunde rennen.", "Ein Mädchen\tsingt."],  # Multi30k train has a tab too
}
VAL = {"en": ["A cat."], "de": ["Eine Katze."]}
TEST = {"en": ["A car."], "de": ["Ein Auto."]}


def pairs(columns: dict[str, list[str]]) -> list[tuple[str, str]]:
    return list(zip(columns["en"], columns["de"], strict=True))


def read_incoming(path: Path, tgt: str = "de") -> list[tuple[str, str]]:
    """Every pair of one incoming file, validated as the stage reads it."""
    return list(iter_incoming(path, tgt))


def test_french_pairs_round_trip_under_their_language_key(tmp_path: Path) -> None:
    (tmp_path / "new.tsv").write_text("A man.\tUn homme.\n", encoding="utf-8")
    assert read_incoming(tmp_path / "new.tsv", "fr") == [("A man.", "Un homme.")]
    write_merged(tmp_path / "m.jsonl", [("A man.", "Un homme.")], "fr")
    assert json.loads((tmp_path / "m.jsonl").read_text()) == {"en": "A man.", "fr": "Un homme."}
    assert read_merged(tmp_path / "m.jsonl", "fr") == (["A man."], ["Un homme."])
    (tmp_path / "bad.tsv").write_text("A man.\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"bad.tsv: line 1: expected 2 tab-separated fields \(en, fr\)"):
        read_incoming(tmp_path / "bad.tsv", "fr")


def test_reads_a_good_file_with_bom_crlf_and_spaces(tmp_path: Path) -> None:
    path = tmp_path / "new.tsv"
    path.write_bytes("\ufeffA boy swims.\tEin Junge schwimmt.\r\n  A bird. \tEin Vogel.\n".encode())
    assert read_incoming(path) == [("A boy swims.", "Ein Junge schwimmt."), ("A bird.", "Ein Vogel.")]
    path.write_bytes(b"A boy swims.\tEin Junge schwimmt.\n\r\n \n\n")  # blank lines at the end: ignored
    assert read_incoming(path) == [("A boy swims.", "Ein Junge schwimmt.")]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"A boy.\tEin Junge.\nA \xff cat.\tEine Katze.\n", r"new\.tsv: line 2: not valid UTF-8"),
        (b"A boy.\tEin Junge.\tmore\n", r"new\.tsv: line 1: expected 2 tab-separated fields .*got 3"),
        (b"A boy. Ein Junge.\n", r"new\.tsv: line 1: expected 2 tab-separated fields .*got 1"),
        (b"A boy.\t \n", r"new\.tsv: line 1: empty de field"),
        (b"A boy.\tEin Junge.\n\nA cat.\tEine Katze.\n", r"new\.tsv: line 2: empty line"),
        (b"A boy.\tEin Junge.\n\n \nA cat.\tEine Katze.\n", r"new\.tsv: line 2: empty line"),
        (b"\nA boy.\tEin Junge.\n", r"new\.tsv: line 1: empty line"),
        (b"A \x07boy.\tEin Junge.\n", r"new\.tsv: line 1: control character U\+0007 in the en field"),
        ("A boy.\t\u200b\n".encode(), r"new\.tsv: line 1: empty de field \(invisible characters only\)$"),
        ("\u200b\u00a0\u200d\ufeff\u2060\tEin Junge.\n".encode(), r"new\.tsv: line 1: empty en field \("),
    ],
)
def test_bad_line_is_one_line_error_naming_file_and_line(
    tmp_path: Path, content: bytes, message: str
) -> None:
    path = tmp_path / "new.tsv"
    path.write_bytes(content)
    with pytest.raises(DataError, match=message) as info:
        read_incoming(path)
    assert "\n" not in str(info.value)


def test_only_visible_tsv_files_in_name_order(tmp_path: Path) -> None:
    for name in ("b.tsv", "a.tsv", ".hidden.tsv", "README.md"):
        (tmp_path / name).write_text("x\ty\n")
    assert [p.name for p in incoming_files(tmp_path)] == ["a.tsv", "b.tsv"]
    assert incoming_files(tmp_path / "absent") == []


def test_merge_drops_leaks_and_duplicates_and_counts_them() -> None:
    train, held_out = pairs(TRAIN), pairs(VAL) + pairs(TEST)
    new = [
        ("A boy swims.", "Ein Junge schwimmt."),  # kept
        ("a  CAT.", "Eine andere Katze."),  # English side is val's (case and spaces ignored)
        ("Some car.", "Ein Auto."),  # German side is test's
        ("A man.", "Ein Mann."),  # already in train
        ("A boy swims.", "Ein  Junge schwimmt."),  # repeats the first incoming pair
        ("A man.", "Ein Herr."),  # same English, new German: a new pair
    ]
    merged, counts = merge(train, new, held_out)
    assert merged == train + [("A boy swims.", "Ein Junge schwimmt."), ("A man.", "Ein Herr.")]
    assert counts == {"pairs_read": 6, "dropped_leak": 2, "dropped_dup": 2, "added": 2, "train_pairs": 5}


def test_leaks_and_duplicates_match_after_unicode_normalisation() -> None:
    """Matching normalises as the tokenizer does (NFKC): an NFD or full-width copy of a held-out
    sentence is a leak, and of a train pair a duplicate."""
    held_out = [("A girl runs.", "Ein M\u00e4dchen l\u00e4uft.")]
    nfd = functools.partial(unicodedata.normalize, "NFD")
    new = [
        ("Someone else.", nfd("Ein M\u00e4dchen l\u00e4uft.")),  # German side of test, in NFD
        ("\uff21 girl runs.", "Etwas anderes."),  # full-width A: English side of test
        ("A girl sings.", nfd("Ein M\u00e4dchen\tsingt.")),  # in train
        ("a man.", "EIN MANN."),  # in train
        ("A woman runs.", "Eine Frau l\u00e4uft."),  # kept
    ]
    merged, counts = merge(pairs(TRAIN), new, held_out)
    assert merged[3:] == [("A woman runs.", "Eine Frau l\u00e4uft.")]
    assert (counts["dropped_leak"], counts["dropped_dup"], counts["added"]) == (2, 2, 1)


def test_ignored_entries_are_named_with_why(tmp_path: Path) -> None:
    (tmp_path / "x.tsv").mkdir()
    (tmp_path / "broken.tsv").symlink_to(tmp_path / "nowhere.tsv")
    for name in ("NEW.TSV", "notes.txt", "good.tsv", "README.md", ".gitkeep", ".new.tsv.swp"):
        (tmp_path / name).write_text("A man.\tEin Mann.\n")
    (tmp_path / "linked.tsv").symlink_to(tmp_path / "good.tsv")  # Git would commit the link only
    assert [p.name for p in incoming_files(tmp_path)] == ["good.tsv"]
    assert [(p.name, why) for p, why in ignored_entries(tmp_path)] == [
        ("NEW.TSV", "the name must end in .tsv, lower case"),
        ("broken.tsv", "a broken symbolic link"),
        ("linked.tsv", "a symbolic link"),
        ("notes.txt", "not a *.tsv file"),
        ("x.tsv", "a directory"),
    ]
    assert ignored_entries(tmp_path / "absent") == []


def test_broken_links_at_any_depth_hidden_or_looping(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "good.tsv").write_text("A man.\tEin Mann.\n")
    (tmp_path / "linked.tsv").symlink_to(tmp_path / "good.tsv")  # resolves: DVC hashes its target
    (tmp_path / "gone.tsv").symlink_to(tmp_path / "nowhere.tsv")
    (tmp_path / ".#good.tsv").symlink_to("user@host.1234")  # an Emacs lock file
    (tmp_path / "sub/loop").symlink_to(tmp_path / "sub/loop")
    (tmp_path / "elsewhere").symlink_to(tmp_path / "sub", target_is_directory=True)  # not walked twice
    assert broken_links(tmp_path) == [tmp_path / ".#good.tsv", tmp_path / "gone.tsv", tmp_path / "sub/loop"]
    assert broken_links(tmp_path / "sub") == [tmp_path / "sub/loop"]
    assert broken_links(tmp_path / "absent") == []


def test_merged_file_round_trips_tabs_and_line_separators(tmp_path: Path) -> None:
    rows = pairs(TRAIN) + [("A\u2028line.", "Eine\u2028Zeile.")]
    write_merged(tmp_path / "m.jsonl", rows)
    en, de = read_merged(tmp_path / "m.jsonl")
    assert list(zip(en, de, strict=True)) == rows
    (tmp_path / "bad.jsonl").write_text('{"en": "x", "de": "y"}\n{"en": "x"}\n')
    with pytest.raises(DataError, match=r"bad\.jsonl: line 2: not a JSON object with fields en, de"):
        read_merged(tmp_path / "bad.jsonl")


@pytest.fixture
def repo(tmp_path: Path, monkeypatch) -> Path:
    """A working directory with params.yaml and a tiny saved corpus."""
    corpus = DatasetDict(
        {
            "train": Dataset.from_dict(TRAIN),
            "val": Dataset.from_dict(VAL),
            "test_2016_flickr": Dataset.from_dict(TEST),
        }
    )
    save_dataset_dict(corpus, tmp_path / "data" / "multi30k")
    write_changed_params(tmp_path / "params.yaml", {"download": {"out_dir": "data/multi30k"}})
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run_stage(repo: Path) -> tuple[bytes, dict]:
    stage.main()  # the default paths of params.yaml's incoming section, relative to `repo`
    counts = json.loads((repo / "reports/incoming.json").read_text())
    return (repo / "data/train_merged.jsonl").read_bytes(), counts


def test_stage_without_files_writes_exactly_the_train_split(repo: Path) -> None:
    absent, counts = run_stage(repo)
    (repo / "data/incoming").mkdir()
    (repo / "data/incoming/README.md").write_text("not data")
    empty, _ = run_stage(repo)
    assert absent == empty  # byte-for-byte: DVC sees the same hash
    assert read_merged(repo / "data/train_merged.jsonl") == (TRAIN["en"], TRAIN["de"])
    assert counts == {
        "files": 0,
        "pairs_read": 0,
        "dropped_leak": 0,
        "dropped_dup": 0,
        "added": 0,
        "train_pairs": 3,
    }
    assert all(isinstance(v, int) for v in counts.values())


def test_stage_adds_new_pairs_and_prints_the_counts(repo: Path, capsys) -> None:
    (repo / "data/incoming").mkdir()
    (repo / "data/incoming/b.tsv").write_text("A boy swims.\tEin Junge schwimmt.\nA cat.\tEine Katze.\n")
    (repo / "data/incoming/a.tsv").write_text("A bird sings.\tEin Vogel singt.\nA man.\tEin Mann.\n")
    _, counts = run_stage(repo)
    en, _ = read_merged(repo / "data/train_merged.jsonl")
    assert en == TRAIN["en"] + ["A bird sings.", "A boy swims."]  # files in name order
    assert counts == {
        "files": 2,
        "pairs_read": 4,
        "dropped_leak": 1,
        "dropped_dup": 1,
        "added": 2,
        "train_pairs": 5,
    }
    assert "1 dropped (in val/test), 1 dropped (duplicates), 2 added" in capsys.readouterr().out


def test_stage_with_a_bad_file_writes_nothing(repo: Path) -> None:
    before, _ = run_stage(repo)
    (repo / "data/incoming").mkdir()
    (repo / "data/incoming/a.tsv").write_text("A bird sings.\tEin Vogel singt.\n")
    (repo / "data/incoming/b.tsv").write_text("A boy swims.\n")
    with pytest.raises(DataError, match=r"b\.tsv: line 1: expected 2 tab-separated fields"):
        run_stage(repo)
    assert (repo / "data/train_merged.jsonl").read_bytes() == before
    assert json.loads((repo / "reports/incoming.json").read_text())["files"] == 0


def test_stage_warns_once_per_ignored_entry_and_writes_the_same(repo: Path, capsys) -> None:
    (repo / "data/incoming").mkdir()
    (repo / "data/incoming/a.tsv").write_text("A bird sings.\tEin Vogel singt.\n")
    merged, counts = run_stage(repo)
    assert capsys.readouterr().err == ""
    (repo / "data/incoming/NEW.TSV").write_text("A boy swims.\tEin Junge schwimmt.\n")
    (repo / "data/incoming/b.tsv").mkdir()
    (repo / "elsewhere.tsv").write_text("A boy swims.\tEin Junge schwimmt.\n")
    (repo / "data/incoming/c.tsv").symlink_to(repo / "elsewhere.tsv")
    assert run_stage(repo) == (merged, counts)  # the same bytes and numbers-only counts
    out = capsys.readouterr()
    assert out.err.splitlines() == [
        "warning: data/incoming/NEW.TSV: ignored (the name must end in .tsv, lower case)",
        "warning: data/incoming/b.tsv: ignored (a directory)",
        "warning: data/incoming/c.tsv: ignored (a symbolic link)",
    ]
    assert "incoming: 1 file(s)" in out.out


def test_streamed_stage_writes_the_bytes_of_the_in_memory_merge(repo: Path) -> None:
    """The stage reads and writes a line at a time; its file is what merging in memory and writing
    the whole set at once gives, for files with a BOM, CRLF ends, U+2028 and repeated pairs."""
    (repo / "data/incoming").mkdir()
    (repo / "data/incoming/a.tsv").write_bytes(
        "\ufeffA boy\u2028swims.\tEin Junge\u2028schwimmt.\r\nA cat.\tEine Katze.\n".encode()
    )
    (repo / "data/incoming/b.tsv").write_bytes(
        "A man.\tEin Mann.\nA  boy\u2028swims. \tEin Junge\u2028schwimmt.".encode()
    )
    streamed, counts = run_stage(repo)
    incoming = read_incoming(repo / "data/incoming/a.tsv") + read_incoming(repo / "data/incoming/b.tsv")
    merged, expected_counts = merge(pairs(TRAIN), incoming, pairs(VAL) + pairs(TEST))
    write_merged(repo / "in_memory.jsonl", merged)
    assert streamed == (repo / "in_memory.jsonl").read_bytes()
    assert counts == {"files": 2, **expected_counts} and counts["added"] == 1
    assert sorted(p.name for p in (repo / "data").iterdir()) == ["incoming", "multi30k", "train_merged.jsonl"]
