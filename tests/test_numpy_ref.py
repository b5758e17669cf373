"""The numpy reference against hand-computed values, so that a mistake shared by the
reference and the torch model cannot hide behind their agreement."""

from __future__ import annotations

import numpy as np
import numpy_ref as ref


def test_softmax_known_values_and_masking():
    np.testing.assert_allclose(ref.softmax(np.array([0.0, np.log(3.0)])), [0.25, 0.75])
    w = ref.softmax(
        np.array([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]]), np.array([[True, False, True], [False] * 3])
    )
    np.testing.assert_allclose(w[0], [1 / (1 + np.e**2), 0.0, np.e**2 / (1 + np.e**2)])
    assert (w[1] == 0).all()
    assert np.isfinite(ref.softmax(np.array([1000.0, 0.0]))).all()  # stable for large scores


def test_attention_hand_example():
    """Two keys; scores q·k/√2 = [0, ln 3] give weights [1/4, 3/4]."""
    q = np.array([[np.sqrt(2) * np.log(3.0), 0.0]])
    k = np.array([[0.0, 1.0], [1.0, 0.0]])
    v = np.array([[4.0, 0.0], [0.0, 8.0]])
    out, w = ref.scaled_dot_product_attention(q, k, v)
    np.testing.assert_allclose(w, [[0.25, 0.75]])
    np.testing.assert_allclose(out, [[1.0, 6.0]])
    out, w = ref.scaled_dot_product_attention(q, k, v, np.array([[True, False]]))
    np.testing.assert_allclose(out, [[4.0, 0.0]])


def test_multi_head_attention_with_identity_projections_is_per_head_attention():
    rng = np.random.default_rng(0)
    x, d, h = rng.standard_normal((5, 6)), 6, 3
    eye, zero = np.eye(d), np.zeros(d)
    got = ref.multi_head_attention(x, x, ref.AttentionWeights(eye, zero, eye, zero, eye, zero, eye, zero), h)
    for head in range(h):
        cols = slice(2 * head, 2 * head + 2)
        np.testing.assert_allclose(
            got[:, cols], ref.scaled_dot_product_attention(x[:, cols], x[:, cols], x[:, cols])[0]
        )


def test_positional_encoding_known_values():
    pe = ref.positional_encoding(3, 4)
    np.testing.assert_allclose(pe[0], [0.0, 1.0, 0.0, 1.0])  # sin 0, cos 0
    np.testing.assert_allclose(pe[2], [np.sin(2), np.cos(2), np.sin(2 / 100), np.cos(2 / 100)])


def test_layer_norm_standardises_then_scales():
    x = np.array([[1.0, 2.0, 3.0, 6.0]])
    y = ref.layer_norm(x, ref.NormWeights(np.ones(4), np.zeros(4)), eps=0.0)
    np.testing.assert_allclose(y, (x - 3.0) / np.sqrt(3.5))
    z = ref.layer_norm(x, ref.NormWeights(np.full(4, 2.0), np.full(4, 1.0)), eps=0.0)
    np.testing.assert_allclose(z, 2 * y + 1)


def test_feed_forward_applies_relu_between_layers():
    w = ref.FeedForwardWeights(
        np.array([[1.0, -1.0]]), np.zeros(2), np.array([[1.0], [10.0]]), np.array([0.5])
    )
    np.testing.assert_allclose(ref.feed_forward(np.array([[2.0], [-3.0]]), w), [[2.5], [30.5]])


def test_residual_post_and_pre_norm():
    x, norm = np.array([[1.0, 3.0]]), ref.NormWeights(np.ones(2), np.zeros(2))
    double = lambda h: 2 * h  # noqa: E731
    np.testing.assert_allclose(ref.residual(x, double, norm, pre_norm=False), ref.layer_norm(3 * x, norm))
    np.testing.assert_allclose(ref.residual(x, double, norm, pre_norm=True), x + 2 * ref.layer_norm(x, norm))
