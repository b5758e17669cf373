"""The number-to-words converter, the split by number, the warm-up vocabulary and stage."""

from __future__ import annotations

import numpy as np
import pytest
from from_params import from_params, write_changed_params

from pipeline.data.multi30k import load_corpus
from pipeline.data.warmup import WarmupVocab, build_warmup_dataset, number_to_words, split_numbers

TABLE = {
    0: "zero",
    7: "seven",
    10: "ten",
    11: "eleven",
    12: "twelve",
    13: "thirteen",
    14: "fourteen",
    15: "fifteen",
    16: "sixteen",
    17: "seventeen",
    18: "eighteen",
    19: "nineteen",
    20: "twenty",
    21: "twenty one",
    40: "forty",
    99: "ninety nine",
    100: "one hundred",
    101: "one hundred one",
    110: "one hundred ten",
    142: "one hundred forty two",
    999: "nine hundred ninety nine",
    1000: "one thousand",
    1001: "one thousand one",
    1010: "one thousand ten",
    2100: "two thousand one hundred",
    10000: "ten thousand",
    12345: "twelve thousand three hundred forty five",
    100000: "one hundred thousand",
    100001: "one hundred thousand one",
    999999: "nine hundred ninety nine thousand nine hundred ninety nine",
}


@pytest.mark.parametrize(("n", "words"), TABLE.items())
def test_number_to_words_table(n: int, words: str) -> None:
    assert number_to_words(n) == words


@pytest.mark.parametrize("n", [-1, 1_000_000])
def test_number_to_words_out_of_range(n: int) -> None:
    with pytest.raises(ValueError, match=str(n)):
        number_to_words(n)


def test_split_is_disjoint_sized_and_seeded() -> None:
    splits = split_numbers(max_number=5000, n_train=3000, n_val=500, n_test=400, seed=3)
    assert {k: len(v) for k, v in splits.items()} == {"train": 3000, "val": 500, "test": 400}
    everything = np.concatenate(list(splits.values()))
    assert len(set(everything.tolist())) == len(everything)
    assert everything.min() >= 0 and everything.max() <= 5000
    again = split_numbers(max_number=5000, n_train=3000, n_val=500, n_test=400, seed=3)
    assert all(np.array_equal(splits[k], again[k]) for k in splits)
    other = split_numbers(max_number=5000, n_train=3000, n_val=500, n_test=400, seed=4)
    assert not np.array_equal(splits["val"], other["val"])


def test_split_refuses_too_many_numbers() -> None:
    with pytest.raises(ValueError):
        split_numbers(max_number=9, n_train=8, n_val=2, n_test=1, seed=0)


def test_dataset_columns() -> None:
    ds = build_warmup_dataset({"train": np.array([142, 0]), "val": np.array([7]), "test": np.array([1001])})
    assert ds["train"][0] == {"src": "142", "tgt": "one hundred forty two"}
    assert list(ds["test"]["tgt"]) == ["one thousand one"]


def test_vocab_special_ids_and_tokens() -> None:
    vocab = WarmupVocab()
    assert (vocab.pad_id, vocab.unk_id, vocab.bos_id, vocab.eos_id) == (0, 1, 2, 3)
    assert vocab.tokens[:4] == ("<pad>", "<unk>", "<s>", "</s>")
    assert len(set(vocab.tokens)) == vocab.vocab_size


def test_vocab_covers_every_word_and_round_trips() -> None:
    vocab = WarmupVocab()
    for n in list(range(0, 1_000_000, 997)) + list(TABLE):
        words = number_to_words(n)
        ids = vocab.encode_tgt(words)
        assert vocab.unk_id not in ids
        assert vocab.decode([vocab.bos_id, *ids, vocab.eos_id, vocab.pad_id]) == words
        src = vocab.encode_src(str(n))
        assert len(src) == len(str(n)) and vocab.unk_id not in src


def test_vocab_unknown_tokens_and_bad_ids() -> None:
    vocab = WarmupVocab()
    with pytest.raises(IndexError):
        vocab.decode([vocab.vocab_size])
    with pytest.raises(IndexError):
        vocab.decode([-1])
    assert vocab.encode_src("1x") == [vocab.encode_src("1")[0], vocab.unk_id]
    assert vocab.encode_tgt("one gazillion") == [vocab.encode_tgt("one")[0], vocab.unk_id]


def test_stage_writes_the_splits(tmp_path, monkeypatch) -> None:
    from stages import warmup_data

    section = {
        "out_dir": "out/warmup",
        "max_number": 999,
        "n_train": 50,
        "n_val": 10,
        "n_test": 10,
        "seed": 1,
    }
    write_changed_params(tmp_path / "params.yaml", {"warmup_data": section})
    monkeypatch.chdir(tmp_path)
    warmup_data.main()
    ds = load_corpus(tmp_path / "out" / "warmup")
    assert {k: len(v) for k, v in ds.items()} == {"train": 50, "val": 10, "test": 10}
    assert ds["val"].column_names == ["src", "tgt"]
    assert all(number_to_words(int(r["src"])) == r["tgt"] for r in ds["train"])


def test_train_stage_writes_numbers_as_metrics_and_gates(tmp_path, monkeypatch) -> None:
    import json

    from pipeline.core.errors import PipelineError
    from stages import warmup_data, warmup_train

    tiny = {"d_model": 16, "n_heads": 2, "n_layers": 1, "d_ff": 32}
    optim = {"max_steps": 4, "val_every": 2, "max_tokens": 400, "warmup_steps": 2, "average_last": 2}
    params = {
        "warmup_data": {"max_number": 999, "n_train": 100, "n_val": 10, "n_test": 10},
        "warmup_train": {"threshold": 0.0, "model": tiny, "optim": optim},
        "decode": {"batch_size": 4, "max_len_b": 3},
    }
    write_changed_params(tmp_path / "params.yaml", params)
    monkeypatch.chdir(tmp_path)
    warmup_data.main()
    warmup_train.main()
    metrics = json.loads((tmp_path / "reports" / "warmup.json").read_text())
    assert set(metrics) == {"exact_match", "steps", "minutes"} and metrics["steps"] == 4
    assert all(isinstance(v, int | float) for v in metrics.values())
    facts = json.loads((tmp_path / "reports" / "warmup_facts.json").read_text())
    assert facts["threshold"] == 0.0 and facts["final_model"]["source"] in facts["final_model"]["candidates"]
    assert (tmp_path / "reports" / "warmup_log.csv").read_text().count("\n") == 3  # header + steps 2, 4
    assert facts["stopped_by"] == "max_steps"
    params["warmup_train"]["threshold"] = 1.0  # unreachable in 4 steps: the gate fails (nothing retrained)
    write_changed_params(tmp_path / "params.yaml", params)
    with pytest.raises(PipelineError, match="warmup gate failed: test exact match 0.0000 < 1.0"):
        warmup_train.main()


class SlowClock:
    """`time` for the training loop on a busy machine: every reading is `minutes` later."""

    def __init__(self, minutes: float) -> None:
        self.now, self.minutes = 0.0, minutes

    def time(self) -> float:
        self.now += self.minutes * 60
        return self.now


def test_warmup_gate_ends_by_steps_however_slow_the_machine(tmp_path, monkeypatch) -> None:
    """The gate's budget is its steps: on a machine whose every step takes minutes, the default
    time cap (a safety net) does not cut it short, and it reaches the steps and exact match of a fast
    run; a cap the old way (5 minutes) would have ended it early."""
    import json
    import shutil

    from pipeline.core.config import WarmupTrainConfig
    from pipeline.training import loop
    from stages import warmup_data, warmup_train

    optim = {"max_steps": 6, "val_every": 2, "max_tokens": 400, "warmup_steps": 2, "average_last": 2}
    params = {
        "warmup_data": {"max_number": 999, "n_train": 100, "n_val": 10, "n_test": 10},
        "warmup_train": {
            "threshold": 0.0,
            "model": {"d_model": 16, "n_heads": 2, "n_layers": 1, "d_ff": 32},
            "optim": optim,
        },
        "decode": {"batch_size": 4, "max_len_b": 3},
    }
    monkeypatch.chdir(tmp_path)
    write_changed_params(tmp_path / "params.yaml", params)
    warmup_data.main()

    def run(max_minutes: float | None, clock: SlowClock | None) -> tuple[dict, dict]:
        cap = {} if max_minutes is None else {"max_minutes": max_minutes}
        params["warmup_train"]["optim"] = optim | cap
        write_changed_params(tmp_path / "params.yaml", params)
        shutil.rmtree(tmp_path / "models", ignore_errors=True)  # a fresh run, not a continued one
        with monkeypatch.context() as m:
            if clock:
                m.setattr(loop, "time", clock)
            warmup_train.main()
        reports = tmp_path / "reports"
        return tuple(
            json.loads((reports / name).read_text()) for name in ("warmup.json", "warmup_facts.json")
        )

    fast, _ = run(None, None)
    slow, slow_facts = run(None, SlowClock(minutes=2.0))
    assert from_params(WarmupTrainConfig).optim.max_minutes >= 60
    assert (
        (slow["steps"], slow["exact_match"])
        == (fast["steps"], fast["exact_match"])
        == (6, fast["exact_match"])
    )
    assert slow_facts["stopped_by"] == "max_steps"
    capped, capped_facts = run(5, SlowClock(minutes=2.0))
    assert capped["steps"] < 6 and capped_facts["stopped_by"] == "max_minutes"
