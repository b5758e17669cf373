"""The from-scratch Transformer: agreement with the numpy reference, masks, causality,
padding invariance, incremental decoding, long inputs, parameter count, a toy overfit."""

from __future__ import annotations

import math

import numpy as np
import numpy_ref as ref
import pytest
import torch
import torch.nn.functional as F
from from_params import from_params
from torch import nn

from pipeline.core.config import ModelConfig
from pipeline.core.params_file import FieldError
from pipeline.model.transformer import (
    DecoderLayer,
    Dropout,
    EncoderLayer,
    FeedForward,
    KVCache,
    LayerCache,
    MultiHeadAttention,
    Transformer,
    attention,
    attention_explicit,
    dropout,
    sinusoid_positions,
)

PAD, BOS, EOS = 0, 2, 3
TOL = 1e-5


# ---------------------------------------------------------------- helpers


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny tensors: one thread. Two OpenMP threads on a busy 2-core box spin-wait and make
    the overfit test ~100x slower (0.4 s -> 36 s measured)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def as_np(t: torch.Tensor) -> np.ndarray:
    return t.detach().double().numpy()


def linear(m: nn.Linear) -> tuple[np.ndarray, np.ndarray]:
    """torch Linear (x @ W.T + b) -> reference (W.T `[D_in, D_out]`, b)."""
    return as_np(m.weight).T, as_np(m.bias)


def attn_weights(m: MultiHeadAttention) -> ref.AttentionWeights:
    """Rows of the fused projections are q, k, v (self) or k, v (cross), in that order."""
    d = m.out_proj.in_features
    if m.cross:
        w_q, b_q = linear(m.q_proj)
        w_kv, b_kv = linear(m.kv_proj)
        w_k, w_v, b_k, b_v = w_kv[:, :d], w_kv[:, d:], b_kv[:d], b_kv[d:]
    else:
        w, b = linear(m.qkv_proj)
        w_q, w_k, w_v = w[:, :d], w[:, d : 2 * d], w[:, 2 * d :]
        b_q, b_k, b_v = b[:d], b[d : 2 * d], b[2 * d :]
    return ref.AttentionWeights(w_q, b_q, w_k, b_k, w_v, b_v, *linear(m.out_proj))


def ffn_weights(m: FeedForward) -> ref.FeedForwardWeights:
    return ref.FeedForwardWeights(*linear(m.w1), *linear(m.w2))


def norm_weights(m: nn.LayerNorm) -> ref.NormWeights:
    return ref.NormWeights(as_np(m.weight), as_np(m.bias))


def encoder_weights(layer: EncoderLayer) -> ref.EncoderLayerWeights:
    norms = (norm_weights(r.norm) for r in (layer.res1, layer.res2))
    return ref.EncoderLayerWeights(attn_weights(layer.self_attn), ffn_weights(layer.ffn), *norms)


def decoder_weights(layer: DecoderLayer) -> ref.DecoderLayerWeights:
    attns = (attn_weights(layer.self_attn), attn_weights(layer.cross_attn))
    norms = (norm_weights(r.norm) for r in (layer.res1, layer.res2, layer.res3))
    return ref.DecoderLayerWeights(*attns, ffn_weights(layer.ffn), *norms)


def randomize(module: nn.Module, seed: int = 0) -> nn.Module:
    """Non-trivial values everywhere (biases, LN gains/biases too), float64, eval mode."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    return module.double().eval()


def tiny_cfg(**kw) -> ModelConfig:
    base = dict(d_model=16, n_heads=4, n_layers=2, d_ff=32, dropout=0.1, attn_dropout=0.1)
    return from_params(ModelConfig, **(base | kw))


def padded_ids(lengths: list[int], vocab: int, seed: int, extra_pad: int = 0) -> torch.Tensor:
    """`[B, max(lengths) + extra_pad]` random non-special ids, PAD after each row's length."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.full((len(lengths), max(lengths) + extra_pad), PAD)
    for row, n in enumerate(lengths):
        ids[row, :n] = torch.randint(4, vocab, (n,), generator=gen)
    return ids


def rand(*shape: int, seed: int = 0, dtype=torch.float64) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def key_padding(lengths: list[int], s: int) -> torch.Tensor:
    """`[B, S]` True at the first `lengths[b]` positions."""
    return torch.arange(s)[None, :] < torch.tensor(lengths)[:, None]


# ---------------------------------------------------------------- agreement with the numpy reference


def test_attention_matches_reference():
    b, h, t, s, e = 3, 2, 5, 6, 8
    q, k, v = rand(b, h, t, e, seed=1), rand(b, h, s, e, seed=2), rand(b, h, s, e, seed=3)
    mask = key_padding([6, 4, 1], s)[:, None, None, :]  # [B, 1, 1, S]
    want_out, want_w = ref.scaled_dot_product_attention(as_np(q), as_np(k), as_np(v), mask.numpy())
    out, w = attention_explicit(q, k, v, mask)
    np.testing.assert_allclose(as_np(w), want_w, atol=TOL)
    np.testing.assert_allclose(as_np(out), want_out, atol=TOL)
    np.testing.assert_allclose(as_np(attention(q, k, v, mask)), want_out, atol=TOL)


@pytest.mark.parametrize("cross", [False, True])
def test_multi_head_attention_matches_reference(cross):
    d, h, t, s = 16, 4, 5, 7
    mha = randomize(MultiHeadAttention(d, h, dropout=0.5, cross=cross))
    x = rand(3, t, d, seed=1)
    if cross:
        memory = rand(3, s, d, seed=2)
        pad = key_padding([7, 3, 5], s)
        got = mha(x, pad[:, None, None, :], mha.project_kv(memory))  # memory keys/values as its cache
        want = ref.multi_head_attention(
            as_np(x), as_np(memory), attn_weights(mha), h, pad[:, None, :].numpy()
        )
    else:
        mask = key_padding([5, 2, 4], t)[:, None, :] & torch.ones(t, t, dtype=torch.bool).tril()  # [B, T, T]
        got = mha(x, mask[:, None])
        want = ref.multi_head_attention(as_np(x), as_np(x), attn_weights(mha), h, mask.numpy())
    np.testing.assert_allclose(as_np(got), want, atol=TOL)


@pytest.mark.parametrize("d_model", [16, 7])
def test_positions_match_reference(d_model):
    got = sinusoid_positions(torch.arange(100), d_model)
    assert got.shape == (100, d_model)
    np.testing.assert_allclose(as_np(got), ref.positional_encoding(100, d_model), atol=TOL)
    # any positions, not only 0..L-1: a slice of a longer table
    np.testing.assert_allclose(
        as_np(sinusoid_positions(torch.arange(40, 60), d_model)),
        ref.positional_encoding(60, d_model)[40:],
        atol=TOL,
    )


def test_layer_norm_matches_reference():
    norm = randomize(nn.LayerNorm(16))
    x = rand(2, 5, 16, seed=4) * 3 + 1
    np.testing.assert_allclose(as_np(norm(x)), ref.layer_norm(as_np(x), norm_weights(norm)), atol=TOL)


def test_feed_forward_matches_reference():
    ffn = randomize(FeedForward(16, 32, dropout=0.5))
    x = rand(2, 5, 16, seed=5)
    np.testing.assert_allclose(as_np(ffn(x)), ref.feed_forward(as_np(x), ffn_weights(ffn)), atol=TOL)


@pytest.mark.parametrize("pre_norm", [False, True])
def test_encoder_layer_matches_reference(pre_norm):
    layer = randomize(EncoderLayer(tiny_cfg(pre_norm=pre_norm)))
    x, pad = rand(3, 6, 16, seed=6), key_padding([6, 2, 4], 6)
    got = layer(x, pad[:, None, None, :])
    want = ref.encoder_layer(as_np(x), encoder_weights(layer), 4, pad[:, None, :].numpy(), pre_norm)
    np.testing.assert_allclose(as_np(got), want, atol=TOL)


@pytest.mark.parametrize("pre_norm", [False, True])
def test_decoder_layer_matches_reference(pre_norm):
    layer = randomize(DecoderLayer(tiny_cfg(pre_norm=pre_norm)))
    x, memory, pad = rand(3, 5, 16, seed=7), rand(3, 6, 16, seed=8), key_padding([6, 1, 3], 6)
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    cache = LayerCache(KVCache(), layer.cross_attn.project_kv(memory))
    got = layer(x, causal, pad[:, None, None, :], cache)
    want = ref.decoder_layer(
        as_np(x),
        as_np(memory),
        decoder_weights(layer),
        4,
        ref.causal_mask(5),
        pad[:, None, :].numpy(),
        pre_norm,
    )
    np.testing.assert_allclose(as_np(got), want, atol=TOL)


@pytest.mark.parametrize("pre_norm, tie", [(False, True), (True, False)])
def test_transformer_matches_reference(pre_norm, tie):
    """The whole model = embeddings × √D + PE, the layer stacks, (final norms), output projection."""
    v, d = 20, 16
    model = randomize(Transformer(tiny_cfg(pre_norm=pre_norm, tie_embeddings=tie), v, PAD))
    src, tgt = padded_ids([6, 3], v, seed=1), padded_ids([5, 2], v, seed=2)
    src_mask = (src != PAD)[:, None, :].numpy()

    def embed(table: nn.Embedding, ids: torch.Tensor) -> np.ndarray:
        return as_np(table.weight)[ids.numpy()] * math.sqrt(d) + ref.positional_encoding(ids.size(1), d)

    x = embed(model.src_embed, src)
    for layer in model.encoder:
        x = ref.encoder_layer(x, encoder_weights(layer), 4, src_mask, pre_norm)
    memory = ref.layer_norm(x, norm_weights(model.enc_norm)) if pre_norm else x
    y = embed(model.tgt_embed, tgt)
    for layer in model.decoder:
        y = ref.decoder_layer(
            y, memory, decoder_weights(layer), 4, ref.causal_mask(tgt.size(1)), src_mask, pre_norm
        )
    if pre_norm:
        y = ref.layer_norm(y, norm_weights(model.dec_norm))
    want = y @ (as_np(model.tgt_embed.weight) if tie else as_np(model.out_proj.weight)).T
    np.testing.assert_allclose(as_np(model(src, tgt)), want, atol=TOL)


# ---------------------------------------------------------------- attention masks


def test_attention_weights_rows_padding_and_fully_masked_rows():
    q, k, v = rand(2, 2, 4, 8, seed=1), rand(2, 2, 5, 8, seed=2), rand(2, 2, 5, 8, seed=3)
    mask = key_padding([5, 3], 5)[:, None, None, :].expand(2, 1, 4, 5).clone()
    mask[1, 0, 2] = False  # one fully masked query row
    out, w = attention_explicit(q, k, v, mask)
    live = mask.any(-1).expand(2, 2, 4)
    torch.testing.assert_close(w.sum(-1)[live], torch.ones_like(w.sum(-1)[live]), rtol=0, atol=1e-12)
    assert (w[1, :, :, 3:] == 0).all()  # padded keys: exactly zero weight
    for got in (out, attention(q, k, v, mask)):
        assert not got.isnan().any()
        assert (got[1, :, 2] == 0).all()  # fully masked row: zero output


def test_fully_masked_row_has_finite_gradients():
    q, k, v = (rand(1, 1, 3, 4, seed=i).requires_grad_() for i in range(3))
    mask = torch.tensor([[True, True, False], [False, False, False], [True, False, False]])
    for fn in (attention, lambda *a: attention_explicit(*a)[0], sdpa):
        q.grad = k.grad = v.grad = None
        fn(q, k, v, mask).sum().backward()
        assert all(t.grad.isfinite().all() for t in (q, k, v))


def sdpa(q, k, v, mask):
    """The fused kernel `attention` uses on CUDA."""
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


@pytest.mark.parametrize("kind", ["none", "padding", "causal", "causal+padding"])
def test_fused_attention_equals_explicit(kind):
    """`attention` runs the fused kernel on CUDA and the explicit math on CPU: both agree."""
    b, h, t, e = 3, 4, 7, 16
    q, k, v = (rand(b, h, t, e, seed=i, dtype=torch.float32) for i in range(3))
    mask = None
    if "padding" in kind:
        mask = key_padding([7, 4, 1], t)[:, None, None, :]
    if "causal" in kind:
        causal = torch.ones(t, t, dtype=torch.bool).tril()
        mask = causal if mask is None else mask & causal
    torch.testing.assert_close(
        sdpa(q, k, v, mask), attention_explicit(q, k, v, mask)[0], rtol=1e-5, atol=1e-5
    )


@pytest.mark.parametrize("p", [0.1, 0.15, 0.5])
def test_dropout_rate_scale_and_gradient(p):
    torch.manual_seed(0)
    x = torch.ones(400, 500, requires_grad=True)
    y = dropout(x, p)
    kept = y != 0
    assert abs(1 - kept.float().mean().item() - p) < 0.005  # 200k draws: std of the rate ~0.0008
    torch.testing.assert_close(y[kept], torch.full_like(y[kept], 1 / (1 - p)))
    y.sum().backward()
    torch.testing.assert_close(x.grad, kept.float() / (1 - p))  # gradient flows through kept only
    assert not torch.equal(kept, dropout(x, p) != 0)  # a fresh mask each call


def test_dropout_module_is_identity_in_eval_and_p0():
    x = torch.randn(3, 5)
    layer = Dropout(0.3).eval()
    assert layer(x) is x and dropout(x, 0.0) is x
    assert not torch.equal(layer.train()(x), x)


# ---------------------------------------------------------------- whole-model behaviour


@pytest.fixture(scope="module")
def model32() -> Transformer:
    """A float32 model in eval mode (dropout configured but off)."""
    torch.manual_seed(0)
    return Transformer(tiny_cfg(d_model=32, d_ff=64), vocab_size=30, pad_id=PAD).eval()


@torch.no_grad()
def test_causality_later_tokens_do_not_change_earlier_logits(model32):
    src, tgt = padded_ids([7, 4], 30, seed=1), padded_ids([6, 6], 30, seed=2)
    base = model32(src, tgt)
    for j in range(tgt.size(1)):
        changed = tgt.clone()
        changed[:, j] = torch.where(tgt[:, j] == 5, 6, 5)
        out = model32(src, changed)
        torch.testing.assert_close(out[:, :j], base[:, :j], rtol=0, atol=1e-6)
        assert not torch.allclose(out[:, j], base[:, j], atol=1e-4)  # position j itself does see it


@torch.no_grad()
def test_padding_invariance(model32):
    src, tgt = padded_ids([7, 4, 1], 30, seed=3), padded_ids([5, 2, 3], 30, seed=4)
    base, memory = model32(src, tgt), model32.encode(src)
    real = src != PAD
    src_more = F.pad(src, (0, 5), value=PAD)
    torch.testing.assert_close(
        model32.encode(src_more)[:, : src.size(1)][real], memory[real], rtol=0, atol=TOL
    )
    torch.testing.assert_close(model32(src_more, tgt), base, rtol=0, atol=TOL)
    tgt_more = F.pad(tgt, (0, 4), value=PAD)
    torch.testing.assert_close(model32(src, tgt_more)[:, : tgt.size(1)], base, rtol=0, atol=TOL)


@pytest.mark.parametrize("pre_norm, tie", [(False, True), (True, False)])
@torch.no_grad()
def test_decode_step_equals_full_decode(pre_norm, tie):
    torch.manual_seed(1)
    model = Transformer(tiny_cfg(d_model=32, d_ff=64, pre_norm=pre_norm, tie_embeddings=tie), 30, PAD).eval()
    src, tgt = padded_ids([8, 3, 5], 30, seed=5), padded_ids([6, 6, 6], 30, seed=6)
    memory = model.encode(src)
    full = model.decode(tgt, memory, src)
    cache = model.init_cache(memory, src)
    for t in range(tgt.size(1)):
        torch.testing.assert_close(model.decode_step(tgt[:, t], cache), full[:, t], rtol=0, atol=TOL)
    assert cache.position == tgt.size(1)


@torch.no_grad()
def test_cache_select_reorders_beams_and_drops_sentences(model32):
    """Two decoder rows (beams) per sentence share its memory keys/values: reordering rows within
    a sentence, then dropping a sentence, gives what full decoding of the same prefixes gives."""
    src, tgt = padded_ids([8, 3, 5], 30, seed=7), padded_ids([6] * 6, 30, seed=8)
    memory = model32.encode(src)
    cache = model32.init_cache(memory, src)
    cache.select(torch.arange(3).repeat_interleave(2))
    for t in range(3):
        model32.decode_step(tgt[:, t], cache)
    order = torch.tensor([1, 1, 2, 3, 5, 4])  # rows 2g, 2g+1 belong to sentence g
    cache.select(order)
    tgt, sent = tgt[order], order // 2
    got = model32.decode_step(tgt[:, 3], cache)
    want = model32.decode(tgt[:, :4], memory[sent], src[sent])[:, 3]
    torch.testing.assert_close(got, want, rtol=0, atol=TOL)
    rows = torch.tensor([0, 1, 4, 5])
    cache.select(rows, sources=torch.tensor([0, 2]))  # sentence 1 is done
    got = model32.decode_step(tgt[rows, 4], cache)
    want = model32.decode(tgt[rows, :5], memory[sent[rows]], src[sent[rows]])[:, 4]
    torch.testing.assert_close(got, want, rtol=0, atol=TOL)
    assert cache.layers[0].cross_attn.k.size(0) == 2  # memory keys stay one per sentence


@torch.no_grad()
def test_forward_keep_equals_all_positions_then_index(model32):
    src, tgt = padded_ids([7, 4, 2], 30, seed=11), padded_ids([6, 1, 3], 30, seed=12)
    keep = tgt != PAD
    got = model32(src, tgt, keep=keep)
    assert got.shape == (int(keep.sum()), 30)
    torch.testing.assert_close(got, model32(src, tgt)[keep], rtol=0, atol=TOL)


def test_forward_keep_gradients_equal_masked_loss():
    """The training contract: the loss over kept positions has the same gradients either way."""
    torch.manual_seed(3)
    model = Transformer(tiny_cfg(d_model=32, d_ff=64, dropout=0.0, attn_dropout=0.0), 30, PAD)
    src, tgt = padded_ids([7, 4], 30, seed=13), padded_ids([5, 2], 30, seed=14)
    keep = tgt != PAD
    grads = []
    for logits in (lambda: model(src, tgt, keep=keep), lambda: model(src, tgt)[keep]):
        model.zero_grad()
        F.cross_entropy(logits(), tgt[keep]).backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@torch.no_grad()
def test_kept_attention_weights_are_those_of_the_decoder(model32):
    """`KVCache.keep_weights` on a cross-attention cache: rows sum to 1, padded source keys get
    none, and asking for them does not change the logits."""
    src, tgt = padded_ids([7, 3], 30, seed=15), padded_ids([4, 4], 30, seed=16)
    memory = model32.encode(src)
    cache = model32.init_cache(memory, src)
    cache.layers[-1].cross_attn.keep_weights = True
    logits = model32.logits(model32.decoder_states(tgt, cache))
    weights = cache.layers[-1].cross_attn.weights
    assert weights.shape == (2, 4, 4, 7)  # [B, H, T, S]
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 4, 4))
    assert (weights[1, :, :, 3:] == 0).all()
    torch.testing.assert_close(logits, model32.decode(tgt, memory, src), rtol=0, atol=TOL)


@torch.no_grad()
def test_long_source_has_no_position_table_limit():
    model = Transformer(tiny_cfg(n_layers=1), vocab_size=30, pad_id=PAD).eval()
    src = padded_ids([2000], 30, seed=9)
    memory = model.encode(src)
    assert memory.shape == (1, 2000, 16) and memory.isfinite().all()
    cache = model.init_cache(memory, src)
    cache.position = 2500  # a decoder step far past any table length
    assert model.decode_step(torch.tensor([BOS]), cache).isfinite().all()


# ---------------------------------------------------------------- size and config


@pytest.mark.parametrize("pre_norm", [False, True])
@pytest.mark.parametrize("tie", [True, False])
def test_parameter_count_closed_form(pre_norm, tie):
    d, h, n, f, v = 256, 4, 3, 512, 8000  # the tutorial's config
    model = Transformer(
        from_params(
            ModelConfig, d_model=d, n_heads=h, n_layers=n, d_ff=f, pre_norm=pre_norm, tie_embeddings=tie
        ),
        v,
        PAD,
    )
    mha = 4 * d * d + 4 * d  # W^Q, W^K, W^V, W^O and their biases
    ffn = 2 * d * f + f + d
    norm = 2 * d
    encoder = n * (mha + ffn + 2 * norm)
    decoder = n * (2 * mha + ffn + 3 * norm)
    embeddings = v * d if tie else 2 * v * d + v * d  # one shared table | src, tgt, out_proj (no bias)
    final_norms = 2 * norm if pre_norm else 0
    assert sum(p.numel() for p in model.parameters()) == encoder + decoder + embeddings + final_norms


def test_heads_must_divide_d_model():
    with pytest.raises(FieldError, match="divisible"):
        from_params(ModelConfig, d_model=250, n_heads=4)


# ---------------------------------------------------------------- learning


def test_small_model_overfits_toy_batch():
    """4 pairs (copy / reverse-ish), d_model 32: cross-entropy < 0.1, then greedy decoding
    with the cache reproduces every target."""
    torch.manual_seed(0)
    pairs = [([4, 5, 6], [7, 8]), ([6, 5], [9, 10, 11]), ([7, 7, 8, 9], [4]), ([10], [5, 6, 7, 8])]
    src = torch.tensor([s + [PAD] * (4 - len(s)) for s, _ in pairs])
    tgt_in = torch.tensor([[BOS] + t + [PAD] * (4 - len(t)) for _, t in pairs])
    tgt_out = torch.tensor([t + [EOS] + [PAD] * (4 - len(t)) for _, t in pairs])
    model = Transformer(tiny_cfg(d_model=32, d_ff=64, dropout=0.0, attn_dropout=0.0), 12, PAD)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(300):
        loss = F.cross_entropy(model(src, tgt_in).flatten(0, 1), tgt_out.flatten(), ignore_index=PAD)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if loss.item() < 0.02:
            break
    assert loss.item() < 0.1
    model.eval()
    with torch.no_grad():
        cache = model.init_cache(model.encode(src), src)
        token, decoded = torch.full((4,), BOS), []
        for _ in range(5):
            token = model.decode_step(token, cache).argmax(-1)
            decoded.append(token)
    decoded = torch.stack(decoded, 1)
    for row, (_, t) in enumerate(pairs):
        assert decoded[row, : len(t) + 1].tolist() == t + [EOS]
