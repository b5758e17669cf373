import random

import numpy as np
import pytest
import torch

from pipeline.data.batching import batch_order, batch_tokens, collate, longest_sides, make_batches


def random_pairs(n: int, seed: int = 0) -> list:
    rng = random.Random(seed)
    return [([4] * rng.randint(1, 40), [5] * rng.randint(1, 40)) for _ in range(n)]


def test_batches_respect_max_tokens_and_cover_every_pair_once():
    pairs = random_pairs(1000)
    for epoch in range(3):
        batches = make_batches(pairs, max_tokens=300, seed=7, epoch=epoch)
        flat = [i for b in batches for i in b]
        assert sorted(flat) == list(range(len(pairs)))
        for b in batches:
            longest = max(max(len(pairs[i][0]), len(pairs[i][1])) for i in b)
            assert batch_tokens(len(b), longest) <= 300


def test_batches_are_length_bucketed_so_padding_stays_small():
    pairs = random_pairs(2000)
    batches = make_batches(pairs, max_tokens=600, seed=1, epoch=0)
    real = sum(max(len(pairs[i][0]), len(pairs[i][1])) for b in batches for i in b)
    padded = sum(
        batch_tokens(len(b), max(max(len(pairs[i][0]), len(pairs[i][1])) for i in b)) for b in batches
    )
    assert real / padded > 0.95


def test_order_depends_on_seed_and_epoch_only():
    pairs = random_pairs(500)
    assert make_batches(pairs, 200, 3, 1) == make_batches(pairs, 200, 3, 1)
    assert make_batches(pairs, 200, 3, 1) != make_batches(pairs, 200, 3, 2)


def test_oversized_pair_gets_its_own_batch():
    pairs = [([4] * 50, [5] * 3), ([4] * 2, [5] * 2)]
    batches = make_batches(pairs, max_tokens=10, seed=0, epoch=0)
    assert sorted(map(sorted, batches)) == [[0], [1]]


def test_collate_shifts_target_and_pads():
    src, tgt_in, tgt_out = collate([([7, 8], [9]), ([7], [9, 10])], pad_id=0, bos_id=2, eos_id=3)
    assert src.tolist() == [[7, 8, 3], [7, 3, 0]]
    assert tgt_in.tolist() == [[2, 9, 0], [2, 9, 10]]
    assert tgt_out.tolist() == [[9, 3, 0], [9, 10, 3]]
    assert src.dtype == torch.long


def reference_batches(pairs: list, max_tokens: int, seed: int, epoch: int) -> list[list[int]]:
    """The batching the trainer used before the numpy cut: a Python loop over every pair."""
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(len(pairs))
    lengths = np.array([max(len(pairs[i][0]), len(pairs[i][1])) for i in order])
    order = order[np.argsort(lengths, kind="stable")]
    out, current, longest = [], [], 0
    for i in order:
        n = max(len(pairs[i][0]), len(pairs[i][1]))
        if current and batch_tokens(len(current) + 1, max(longest, n)) > max_tokens:
            out.append(current)
            current, longest = [], 0
        current.append(int(i))
        longest = max(longest, n)
    if current:
        out.append(current)
    return [out[j] for j in rng.permutation(len(out))]


@pytest.mark.parametrize(("max_tokens", "seed"), [(300, 7), (60, 1), (2500, 3), (10, 0)])
def test_numpy_cut_gives_exactly_the_loop_order(max_tokens: int, seed: int) -> None:
    """Same batches in the same order as the per-pair loop, so runs (and their resumes) are unchanged;
    with empty pairs (cost nothing) and pairs longer than max_tokens among them."""
    rng = random.Random(seed)
    pairs = [([4] * rng.choice([0, 1, 3, 20, 50, 400]), [5] * rng.randint(0, 40)) for _ in range(3000)]
    for epoch in range(3):
        assert make_batches(pairs, max_tokens, seed, epoch) == reference_batches(
            pairs, max_tokens, seed, epoch
        )


def test_batch_order_from_lengths_alone_matches_make_batches() -> None:
    pairs = random_pairs(800, seed=5)
    got = batch_order(longest_sides(pairs), 250, seed=2, epoch=4)
    assert [b.tolist() for b in got] == make_batches(pairs, 250, 2, 4)
    assert batch_order(np.zeros(0, dtype=np.int64), 250, 0, 0) == []
