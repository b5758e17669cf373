"""The CUDA paths, run on a GPU (all skipped without one; `checks/gpu_check.sh` runs them there).

- the fused attention kernel (`F.scaled_dot_product_attention`, which `pipeline.model.transformer.attention`
  calls on CUDA) against the explicit math, for every mask kind, in fp32 and bf16;
- training steps under bf16 autocast: finite, and the loss falls;
- a checkpoint written on CUDA loads on the CPU and decodes the same;
- beam search: a sentence's output does not depend on its batch (1 vs 64 sentences);
- data-parallel training over NCCL on every GPU of the machine (skipped with fewer than 2).

The toy task is reversing a random id sequence: a tiny model learns it in a few hundred steps, so
its outputs are confident and comparing them across devices and batch sizes is meaningful.
`python tests/test_cuda.py --ddp-worker OUT_DIR`, under torchrun, is the DDP test's worker.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from from_params import from_params

from pipeline.core.config import ModelConfig, OptimConfig
from pipeline.core.device import autocast, use_bf16
from pipeline.data.batching import collate
from pipeline.model.beam import beam_search
from pipeline.model.greedy import greedy
from pipeline.model.transformer import Transformer, attention, attention_explicit
from pipeline.training import checkpoint
from pipeline.training.loop import make_optimizer

REPO = Path(__file__).resolve().parents[1]
CUDA = torch.cuda.is_available()
pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")]

PAD, BOS, EOS, VOCAB = 0, 2, 3, 24  # ids 4..23 are the toy "words"
TINY = from_params(ModelConfig, d_model=64, n_heads=4, n_layers=2, d_ff=128, dropout=0.0)
MASK_KINDS = ("none", "padding", "causal", "fully_masked_row")


def toy_pairs(n: int, seed: int, max_len: int = 10) -> list[tuple[list[int], list[int]]]:
    """`n` seeded pairs (random ids 4..VOCAB-1, length 2..max_len) and their reverse."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        length = int(torch.randint(2, max_len + 1, (1,), generator=g))
        src = torch.randint(4, VOCAB, (length,), generator=g).tolist()
        out.append((src, src[::-1]))
    return out


def batch_loss(model: Transformer, pairs, device: torch.device, bf16: bool) -> tuple[torch.Tensor, int]:
    """Summed cross-entropy (nats) of `pairs` and their target tokens (eos included)."""
    src, tgt_in, tgt_out = (t.to(device) for t in collate(pairs, PAD, BOS, EOS))
    with autocast(device, bf16):
        logits = model(src, tgt_in)
    loss = F.cross_entropy(logits.flatten(0, 1).float(), tgt_out.flatten(), ignore_index=PAD, reduction="sum")
    return loss, int((tgt_out != PAD).sum())


def train_steps(model: Transformer, steps: int, bf16: bool, seed: int = 0) -> list[float]:
    """`steps` Adam steps of 64 fresh toy pairs each, the learning rate rising linearly to 3e-3 over
    50 steps and falling linearly to 0 at the end; returns the loss per target token of each step.
    (600 steps reverse every test sentence of `sources`, measured on a CPU.)"""
    device = next(model.parameters()).device
    optimizer = make_optimizer(model, from_params(OptimConfig, peak_lr=3e-3))
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min((s + 1) / 50, (steps - s) / (steps - 50))
    )
    model.train()
    losses = []
    for step in range(steps):
        loss, n_tokens = batch_loss(model, toy_pairs(64, seed * 100_000 + step), device, bf16)
        optimizer.zero_grad(set_to_none=True)
        (loss / n_tokens).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        losses.append(loss.item() / n_tokens)
    return losses


def sources(n: int, seed: int) -> torch.Tensor:
    """`[n, S]` padded sources (ids + eos) of seeded toy sentences."""
    src, _, _ = collate(toy_pairs(n, seed), PAD, BOS, EOS)
    return src


@pytest.fixture
def exact_fp32():
    """fp32 matmuls in full precision (no TF32), so fp32 comparisons mean fp32."""
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    yield
    torch.set_float32_matmul_precision(before)


@pytest.fixture(scope="module")
def trained() -> Transformer:
    """The tiny model trained on CUDA in fp32 until it reverses sequences (eval mode)."""
    torch.manual_seed(0)
    model = Transformer(TINY, VOCAB, PAD).cuda()
    train_steps(model, 600, bf16=False)
    return model.eval()


# ---- fused attention against the explicit math -----------------------------------------------


def attention_inputs(kind: str, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    """q `[B, H, T, E]`, k, v `[B, H, S, E]` and a mask of `kind` (True = may attend), on CUDA.

    padding: `[B, 1, 1, S]`, sentence b keeps its first S - 2b keys (cross-attention over a
    padded source). causal: `[T, T]` lower triangle (decoder self-attention, T = S).
    fully_masked_row: the padding mask with sentence 1 masked entirely (an all-pad source).
    """
    b, h, s, e = 3, 4, 9, 64
    t = s if kind == "causal" else 7
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(b, h, n, e, device="cuda", generator=g).to(dtype) for n in (t, s, s))
    mask = None
    if kind == "causal":
        mask = torch.ones(t, t, dtype=torch.bool, device="cuda").tril()
    elif kind in ("padding", "fully_masked_row"):
        lengths = torch.tensor([s - 2 * i for i in range(b)], device="cuda")
        mask = (torch.arange(s, device="cuda")[None, :] < lengths[:, None])[:, None, None, :]
        if kind == "fully_masked_row":
            mask[1] = False
    return q, k, v, mask


@pytest.mark.parametrize("kind", MASK_KINDS)
def test_fused_attention_equals_explicit_in_fp32(kind, exact_fp32):
    q, k, v, mask = attention_inputs(kind, torch.float32)
    fused = attention(q, k, v, mask)
    explicit, weights = attention_explicit(q, k, v, mask)
    assert fused.is_cuda and fused.shape == explicit.shape
    assert torch.isfinite(fused).all(), "the fused kernel gave NaN/inf"
    torch.testing.assert_close(fused, explicit, atol=1e-5, rtol=0)
    if kind == "fully_masked_row":
        assert (fused[1] == 0).all() and (weights[1] == 0).all()


@pytest.mark.parametrize("kind", MASK_KINDS)
def test_fused_attention_in_bf16_within_stated_tolerance(kind, exact_fp32):
    """bf16 keeps 8 significant bits (a relative rounding of up to 2^-9). The fused kernel
    accumulates in fp32 and rounds its output once: within 2^-7 of the largest output of an fp64
    reference on the same bf16 inputs. The explicit math also rounds the scores, the weights and
    the output to bf16, so the two may differ by a few bf16 steps: 2^-5 of the largest output
    (3%) is the stated tolerance. A wrong mask or scale errs by O(1), far beyond either."""
    q, k, v, mask = attention_inputs(kind, torch.bfloat16)
    reference, _ = attention_explicit(q.double(), k.double(), v.double(), mask)
    scale = reference.abs().max().item()
    fused = attention(q, k, v, mask)
    explicit, _ = attention_explicit(q, k, v, mask)
    assert fused.dtype == torch.bfloat16 and torch.isfinite(fused).all()
    torch.testing.assert_close(fused.double(), reference, atol=2**-7 * scale, rtol=0)
    torch.testing.assert_close(fused.float(), explicit.float(), atol=2**-5 * scale, rtol=0)
    if kind == "fully_masked_row":
        assert (fused[1] == 0).all()


# ---- training, checkpoints, decoding ------------------------------------------------------------


def test_bf16_autocast_training_stays_finite_and_learns():
    device = torch.device("cuda")
    assert use_bf16(device, "auto"), "bf16 autocast is the CUDA default"
    torch.manual_seed(1)
    model = Transformer(TINY, VOCAB, PAD).to(device)
    src, tgt_in, _ = (t.to(device) for t in collate(toy_pairs(4, 0), PAD, BOS, EOS))
    with autocast(device, True):
        assert model(src, tgt_in).dtype == torch.bfloat16, "autocast did not run the model in bf16"
    losses = train_steps(model, 150, bf16=True, seed=1)
    assert all(torch.isfinite(torch.tensor(losses)))
    assert all(p.dtype == torch.float32 and torch.isfinite(p).all() for p in model.parameters())
    first, last = sum(losses[:5]) / 5, sum(losses[-10:]) / 10
    assert last < 0.3 * first, f"loss fell only from {first:.3f} to {last:.3f}"


def test_checkpoint_written_on_cuda_loads_on_cpu_and_decodes_the_same(trained, tmp_path, exact_fp32):
    state = {
        "model": trained.state_dict(),  # CUDA tensors
        "model_cfg": trained.cfg.model_dump(),
        "vocab_size": VOCAB,
        "pad_id": PAD,
        "bos_id": BOS,
        "eos_id": EOS,
    }
    checkpoint.save(tmp_path / "model.pt", state)
    on_cpu, _ = checkpoint.load_model(tmp_path / "model.pt", vocab_size=VOCAB)
    for name, tensor in on_cpu.state_dict().items():
        assert tensor.device.type == "cpu"
        assert torch.equal(tensor, trained.state_dict()[name].cpu()), name
    src = sources(64, seed=7)
    want = [src_ids[src_ids > EOS].tolist()[::-1] for src_ids in src]
    on_gpu = greedy(trained, src.cuda(), BOS, EOS, max_len_a=1.5, max_len_b=4)
    assert sum(h == w for h, w in zip(on_gpu, want, strict=True)) >= 0.9 * len(want), "toy model undertrained"
    assert greedy(on_cpu, src, BOS, EOS, max_len_a=1.5, max_len_b=4) == on_gpu


def test_beam_search_output_does_not_depend_on_the_batch(trained, exact_fp32):
    """The decode stage runs the model in fp32 (no autocast), so that is compared here: exactly the
    same ids for 64 sentences decoded together as one at a time. fp32 results differ in the last
    bits between batch shapes (other kernels, other source padding), which could flip only a choice
    between scores closer than that, which a trained model's beams do not come near."""
    src = sources(64, seed=11).cuda()
    together = beam_search(
        trained, src, BOS, EOS, beam_size=5, length_penalty=0.6, max_len_a=1.5, max_len_b=4
    )
    for i in range(src.size(0)):
        alone = src[i : i + 1, : int((src[i] != PAD).sum())]
        assert beam_search(
            trained, alone, BOS, EOS, beam_size=5, length_penalty=0.6, max_len_a=1.5, max_len_b=4
        ) == [together[i]], f"sentence {i}"
    assert len({tuple(t) for t in together}) > 32, "degenerate outputs prove nothing"


# ---- data-parallel training over NCCL ---------------------------------------------------------

DDP_STEPS, DDP_PAIRS_PER_RANK = 5, 16


@pytest.mark.skipif(CUDA and torch.cuda.device_count() < 2, reason="DDP needs at least 2 GPUs")
def test_ddp_over_nccl_matches_one_process(tmp_path):
    n = torch.cuda.device_count()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={n}"]
    cmd += [__file__, "--ddp-worker", str(tmp_path)]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    facts = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(n)]
    assert [f["backend"] for f in facts] == ["nccl"] * n
    assert all(f["rank_sum"] == n * (n - 1) / 2 for f in facts)
    reference = torch.load(tmp_path / "reference.pt")
    for r in range(n):
        weights = torch.load(tmp_path / f"rank{r}.pt")
        torch.testing.assert_close(weights, reference, atol=1e-4, rtol=0)


def ddp_worker(out_dir: Path) -> None:
    """One rank: DDP over NCCL on its own GPU, each rank its share of every step's global batch,
    the loss normalised by the global token count (as `pipeline.training.loop` does); rank 0 then trains
    the same start weights on the whole batches alone. Writes rank<r>.pt (flat weights),
    rank<r>.json and reference.pt."""
    from torch.nn.parallel import DistributedDataParallel

    from pipeline.training import distributed

    torch.set_float32_matmul_precision("highest")
    world, device = distributed.init(torch.device("cuda"))
    torch.manual_seed(world.rank)  # different start weights per rank: DDP must broadcast rank 0's
    model = Transformer(TINY, VOCAB, PAD).to(device)
    start = {k: v.clone() for k, v in model.state_dict().items()}
    ddp = DistributedDataParallel(model, device_ids=[device.index])
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for step in range(DDP_STEPS):
        batch = toy_pairs(DDP_PAIRS_PER_RANK * world.size, seed=step)
        mine = batch[world.rank :: world.size]
        n_tokens = world.sum(sum(len(t) + 1 for _, t in mine))
        loss, _ = batch_loss(ddp, mine, device, bf16=False)
        optimizer.zero_grad(set_to_none=True)
        (loss * world.size / n_tokens).backward()
        optimizer.step()
    flat = torch.cat([p.detach().flatten() for p in model.parameters()]).cpu()
    torch.save(flat, out_dir / f"rank{world.rank}.pt")
    facts = {"backend": torch.distributed.get_backend(), "rank_sum": world.sum(world.rank)}
    (out_dir / f"rank{world.rank}.json").write_text(json.dumps(facts))
    if world.is_main:
        torch.save(one_process_reference(start, device), out_dir / "reference.pt")
    distributed.close()


def one_process_reference(start: dict, device: torch.device) -> torch.Tensor:
    """Rank 0's start weights trained alone on the whole global batches (flat weights)."""
    model = Transformer(TINY, VOCAB, PAD).to(device)
    model.load_state_dict(start)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    size = torch.distributed.get_world_size()
    for step in range(DDP_STEPS):
        loss, n_tokens = batch_loss(model, toy_pairs(DDP_PAIRS_PER_RANK * size, seed=step), device, False)
        optimizer.zero_grad(set_to_none=True)
        (loss / n_tokens).backward()
        optimizer.step()
    return torch.cat([p.detach().flatten() for p in model.parameters()]).cpu()


if __name__ == "__main__" and sys.argv[1:2] == ["--ddp-worker"]:
    ddp_worker(Path(sys.argv[2]))
