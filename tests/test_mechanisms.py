"""Tests of skprivfact.mechanisms: clipping, Gaussian releases, geometric noise."""

import math
import random
from fractions import Fraction

import numpy as np
import pytest
import scipy.sparse as sp
from scipy import stats

from skprivfact import exceptions, mechanisms
from skprivfact.mechanisms import (
    PrivacyLeakWarning,
    clip_frobenius,
    clip_rows,
    gaussian_mechanism,
    gaussian_noise_scales,
    project_psd,
    symmetric_gaussian_noise,
    two_sided_geometric,
)

# Statistical tests below use fixed seeds, so they are deterministic; the
# tolerances are set so that a correct implementation would fail them with
# probability about 1e-6 under a random seed.
TAIL_PROBABILITY = 1e-6


def exact_squared_norm(values):
    return sum(Fraction(float(v)) ** 2 for v in np.ravel(values))


def assert_exactly_within(rows, max_norm):
    bound = Fraction(max_norm) ** 2
    for i, row in enumerate(rows):
        assert exact_squared_norm(row) <= bound, f"row {i} exceeds {max_norm}"


def test_privacy_leak_warning_is_reexported():
    assert PrivacyLeakWarning is exceptions.PrivacyLeakWarning
    assert "PrivacyLeakWarning" in mechanisms.__all__


# Clipping ------------------------------------------------------------------

ADVERSARIAL_ROWS = np.array(
    [
        [1e300, 1e300, -1e300, 0.0],
        [1.7e308, -1.7e308, 1.7e308, 1.7e308],  # squares overflow float64
        [1e-300, 2e-300, 0.0, -3e-300],  # squares underflow float64
        [5e-324, 5e-324, -5e-324, 0.0],  # subnormal
        [1.0, 1e-320, 0.0, 0.0],  # mixed scales
        [3.0, 4.0, 0.0, 0.0],  # norm exactly 5
        [3.0, np.nextafter(4.0, 5.0), 0.0, 0.0],  # one ulp above 5
        [0.6, 0.8, 0.0, 0.0],
        [0.0, 0.0, 0.0, 0.0],
        [-0.0, 0.0, -0.0, 0.0],
        [1e-3, -2e-3, 5e-4, 0.0],
        [7.0, -1.0, 2.0, 1e10],
    ]
)
ADVERSARIAL_BOUNDS = [5.0, 1.0, 0.1, 1e-310, 5e-324, 1e-300, 1e300, 1.7e308, 1e10]


def test_scaled_row_norms_are_exact_within_the_error_bound():
    # The clipping guarantee rests on ||row|| = m * r within the bound of
    # _norm_relative_error_bound, at every scale and for strided views.
    rows = np.vstack([ADVERSARIAL_ROWS, np.random.RandomState(0).normal(size=(20, 4))])
    bound = mechanisms._norm_relative_error_bound(rows.shape[1])
    wide = np.zeros((rows.shape[0], 9))
    wide[:, ::2][:, :4] = rows
    for view in (rows, np.asfortranarray(rows), wide[:, ::2][:, :4]):
        row_max, scaled_norm = mechanisms._scaled_row_norms(view)
        for i, row in enumerate(rows):
            assert row_max[i] == np.max(np.abs(row))
            exact = exact_squared_norm(row)
            if exact == 0:
                assert scaled_norm[i] == 0.0
                continue
            computed = Fraction(float(row_max[i])) * Fraction(float(scaled_norm[i]))
            assert abs(computed**2 / exact - 1) <= 3 * Fraction(bound), f"row {i}"


@pytest.mark.parametrize("row_scale", [1.0, 2.0**-1060, 1e-310, 2.0**1023, 1.7e308])
def test_scaled_row_norms_never_underestimate_at_any_width(row_scale):
    # The kernel runs four interleaved chains and a remainder loop: for every
    # width from 1 to 9 and every position of the largest entry (in a chain
    # or in the remainder), the computed norm times 1 + the error bound is
    # at least the exact norm, so that the clip's test cannot pass a row
    # that exceeds the bound. Row maxima near 2**-1074 and 2**1024 take the
    # kernel's division branch.
    rng = np.random.RandomState(3)
    for width in range(1, 10):
        bound = Fraction(mechanisms._norm_relative_error_bound(width))
        rows = []
        for position in range(width):
            magnitudes = 10.0 ** rng.uniform(-3, 0, size=width)
            row = rng.uniform(-0.9, 0.9, size=width) * magnitudes
            row[position] = -1.0 if position % 2 else 1.0
            rows.append(row * row_scale)
        rows = np.array(rows)
        row_max, scaled_norm = mechanisms._scaled_row_norms(rows)
        for i, row in enumerate(rows):
            assert row_max[i] == np.max(np.abs(row)), (width, i)
            computed = Fraction(float(row_max[i])) * Fraction(float(scaled_norm[i]))
            exact = exact_squared_norm(row)
            assert (computed * (1 + bound)) ** 2 >= exact, (width, i)
            assert (computed * (1 - bound)) ** 2 <= exact, (width, i)


@pytest.mark.parametrize("max_norm", ADVERSARIAL_BOUNDS)
def test_clip_rows_adversarial_rows_never_exceed_bound(max_norm):
    X = ADVERSARIAL_ROWS.copy()
    clipped = clip_rows(X, max_norm)
    assert_exactly_within(clipped, max_norm)
    np.testing.assert_array_equal(X, ADVERSARIAL_ROWS)  # input untouched
    bound = Fraction(max_norm) ** 2
    for row, original in zip(clipped, ADVERSARIAL_ROWS, strict=True):
        if exact_squared_norm(original) <= bound * (1 - Fraction(1, 10**9)):
            # Rows inside by more than rounding are returned bit for bit.
            np.testing.assert_array_equal(row, original)
        elif exact_squared_norm(original) <= bound:
            # Rows within rounding of the sphere move inwards by rounding only.
            np.testing.assert_allclose(row, original, rtol=1e-12, atol=0)
        else:
            # Clipped rows keep their direction (sign pattern and zeros).
            assert np.all(np.sign(row) * np.sign(original) >= 0)


@pytest.mark.parametrize("exponent", [-1070, -600, -1, 0, 1, 500, 1020])
def test_clip_rows_moves_rows_on_the_boundary_by_rounding_only(exponent):
    # 3, 4, 5 scaled by a power of two are exact floats with an exact norm.
    scale = 2.0**exponent
    X = np.array([[3 * scale, 4 * scale], [-4 * scale, 3 * scale]])
    on_sphere = clip_rows(X, 5 * scale)
    assert_exactly_within(on_sphere, 5 * scale)
    # Subnormal rows (exponent -1070) move by a few units in the last place.
    np.testing.assert_allclose(on_sphere, X, rtol=1e-13, atol=2.0**-1066)
    above = X.copy()
    above[:, 1] = np.nextafter(above[:, 1], np.inf * np.sign(above[:, 1]))
    clipped = clip_rows(above, 5 * scale)
    assert_exactly_within(clipped, 5 * scale)
    assert not np.array_equal(clipped, above)


def test_clip_rows_scales_outside_rows_onto_the_sphere():
    rng = np.random.RandomState(0)
    X = rng.normal(size=(500, 40)) * 10.0 ** rng.uniform(-3, 3, size=(500, 1))
    max_norm = 1.0
    clipped = clip_rows(X, max_norm)
    norms = np.linalg.norm(X, axis=1)
    outside = norms > max_norm
    clipped_norms = np.linalg.norm(clipped, axis=1)
    # The margin below the bound is a few times n_features * 1e-16.
    np.testing.assert_allclose(clipped_norms[outside], max_norm, rtol=1e-11)
    np.testing.assert_allclose(
        clipped[outside], X[outside] / norms[outside, None] * max_norm, rtol=1e-11
    )
    np.testing.assert_array_equal(clipped[~outside], X[~outside])


def test_clip_rows_property_random_scales():
    rng = np.random.RandomState(1)
    for _ in range(200):
        n_samples, n_features = rng.randint(1, 6), rng.randint(1, 12)
        row_scales = 10.0 ** rng.uniform(-300, 300, size=(n_samples, 1))
        entry_scales = 10.0 ** rng.uniform(-8, 0, size=(n_samples, n_features))
        X = rng.normal(size=(n_samples, n_features)) * row_scales * entry_scales
        max_norm = 10.0 ** rng.uniform(-300, 300)
        assert_exactly_within(clip_rows(X, max_norm), max_norm)


def test_clip_rows_property_near_the_boundary():
    # Rows scaled to norm max_norm * (1 + tiny) are where rounding could break
    # the bound.
    rng = np.random.RandomState(2)
    X = rng.normal(size=(300, 7))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    X *= 1.0 + rng.randint(-4, 5, size=(300, 1)) * 2.0**-52
    assert_exactly_within(clip_rows(X, 1.0), 1.0)


def numpy_clip_rows(X, max_norm):
    """The numpy path of clip_rows (taken below the subnormal bound): the reference."""
    return mechanisms._clip_rows_inplace(np.array(X, dtype=np.float64), max_norm)


def assert_same_bits(actual, expected):
    # -0.0 and 0.0 differ here, as they do not for assert_array_equal.
    assert actual.shape == expected.shape
    np.testing.assert_array_equal(
        np.ascontiguousarray(actual).view(np.uint64),
        np.ascontiguousarray(expected).view(np.uint64),
    )


def test_clip_rows_kernel_matches_the_numpy_path_bit_for_bit():
    # clip_rows runs the numba kernel above the subnormal bound: the same
    # float operations per entry as the numpy path, so the same bits, on
    # adversarial rows, rows at random scales (both branches of the factor),
    # rows within rounding of the sphere, every width around the kernel's
    # blocks of four, and Fortran-ordered input (kept as it is, so that the
    # kernel runs on it; strided input is copied first).
    rng = np.random.RandomState(4)
    cases = [(ADVERSARIAL_ROWS, b) for b in ADVERSARIAL_BOUNDS if b > 2.0**-960]
    for _ in range(300):
        n_samples, n_features = rng.randint(1, 8), rng.randint(1, 14)
        row_scales = 10.0 ** rng.uniform(-300, 300, size=(n_samples, 1))
        X = rng.normal(size=(n_samples, n_features)) * row_scales
        X[rng.rand(n_samples) < 0.2] = 0.0
        X[rng.rand(*X.shape) < 0.1] = -0.0
        cases.append((X, 10.0 ** rng.uniform(-280, 300)))
    near = rng.normal(size=(200, 9))
    near /= np.linalg.norm(near, axis=1, keepdims=True)
    near *= 1.0 + rng.randint(-4, 5, size=(200, 1)) * 2.0**-52
    cases.append((near, 1.0))
    wide = rng.normal(size=(30, 11))
    cases += [(wide[:, ::2], 0.5), (np.asfortranarray(wide), 0.5)]
    for X, max_norm in cases:
        clipped = clip_rows(X, max_norm)
        assert_same_bits(clipped, numpy_clip_rows(X, max_norm))
        assert_exactly_within(clipped, max_norm)
    assert clip_rows(np.asfortranarray(wide), 0.5).flags.f_contiguous


def test_clip_rows_returns_a_row_at_the_tie_unchanged():
    # A row whose computed norm times 1 + the error bound equals the bound
    # exactly is certified inside and returned bit for bit (-0.0 included).
    X = np.array([[1.0, 0.5, 0.25], [-0.0, 3.0, 4.0]])
    error_bound = mechanisms._norm_relative_error_bound(3)
    _, scaled_norm = mechanisms._scaled_row_norms(X)
    max_norm = float(scaled_norm[0] * (1.0 + error_bound))  # row maximum 1
    clipped = clip_rows(X, max_norm)
    assert_same_bits(clipped[0], X[0])
    assert_same_bits(clipped, numpy_clip_rows(X, max_norm))


@pytest.mark.parametrize("width", [1, 3, 4, 5, 8, 9])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_clip_rows_refuses_any_non_finite_entry(width, bad):
    # Wherever the entry sits (in a block of four or the remainder, beside
    # zeros, which max() could let a NaN hide among), the kernel refuses it;
    # finite rows whose entries would overflow a sum are not mistaken for it.
    for position in range(width):
        X = np.zeros((3, width))
        X[0] = 1.7e308
        X[2, position] = bad
        with pytest.raises(ValueError, match="X must not contain NaN or infinity"):
            clip_rows(X, 1.0)
        with pytest.raises(ValueError, match="stats must not contain NaN"):
            clip_frobenius(X[:, np.newaxis, :], 1.0)
    huge = np.full((2, width), 1.7e308)
    assert_exactly_within(clip_rows(huge, 1.0), 1.0)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_clip_rows_refuses_non_finite_entries_on_every_path(bad):
    # The numpy path below the subnormal bound, and arrays of the wrong
    # shape, whose finiteness is checked before their shape.
    with pytest.raises(ValueError, match="X must not contain NaN or infinity"):
        clip_rows([[bad, 1.0]], 2.0**-1000)
    with pytest.raises(ValueError, match="stats must not contain NaN or infinity"):
        clip_frobenius([[bad, 1.0]], 2.0**-1000)
    with pytest.raises(ValueError, match="X must not contain NaN or infinity"):
        clip_rows(np.array([bad, 1.0]), 1.0)
    with pytest.raises(ValueError, match="X must not contain NaN or infinity"):
        clip_rows(np.full((2, 2, 2), bad), 1.0)
    with pytest.raises(ValueError, match="stats must not contain NaN or infinity"):
        clip_frobenius(np.float64(bad), 1.0)


def test_clip_rows_empty_and_dtype():
    assert clip_rows(np.zeros((0, 3)), 1.0).shape == (0, 3)
    clipped = clip_rows(np.array([[3, 4]], dtype=np.int64), 1.0)
    assert clipped.dtype == np.float64
    assert_exactly_within(clipped, 1.0)


def test_clip_frobenius_bounds_each_record():
    rng = np.random.RandomState(3)
    stats_ = rng.normal(size=(50, 4, 6)) * 10.0 ** rng.uniform(-5, 5, size=(50, 1, 1))
    stats_[0] = 0.0
    original = stats_.copy()
    clipped = clip_frobenius(stats_, 2.0)
    assert clipped.shape == stats_.shape
    np.testing.assert_array_equal(stats_, original)
    assert_exactly_within(clipped.reshape(50, -1), 2.0)
    np.testing.assert_array_equal(
        clipped, clip_rows(stats_.reshape(50, -1), 2.0).reshape(stats_.shape)
    )
    # A vector of per-record scalars is clipped to [-max_norm, max_norm].
    scalars = clip_frobenius(np.array([-3.0, 0.5, 2.0]), 1.0)
    assert scalars[1] == 0.5
    assert -1.0 <= scalars[0] < -1.0 + 1e-12 and 1.0 - 1e-12 < scalars[2] <= 1.0


@pytest.mark.parametrize(
    "X, max_norm, message",
    [
        (np.ones((2, 2)), 0.0, "max_norm must be a positive finite number"),
        (np.ones((2, 2)), -1.0, "max_norm must be a positive finite number"),
        (np.ones((2, 2)), np.inf, "max_norm must be a positive finite number"),
        (np.ones((2, 2)), np.nan, "max_norm must be a positive finite number"),
        (np.ones(3), 1.0, "X must be a 2-D array"),
        (np.ones((2, 2, 2)), 1.0, "X must be a 2-D array"),
        ([[1.0, np.nan]], 1.0, "X must not contain NaN or infinity"),
        ([[1.0, np.inf]], 1.0, "X must not contain NaN or infinity"),
        ([["a", "b"]], 1.0, "X must be an array of real numbers"),
        (sp.csr_matrix(np.ones((2, 2))), 1.0, "X must be a dense array"),
    ],
)
def test_clip_rows_bad_input(X, max_norm, message):
    with pytest.raises(ValueError, match=message):
        clip_rows(X, max_norm)


@pytest.mark.parametrize(
    "stats_, max_norm, message",
    [
        (np.ones((2, 2)), 0.0, "max_norm must be a positive finite number"),
        (np.float64(1.0), 1.0, "stats must have shape \\(n_records, ...\\)"),
        (np.array([[np.inf]]), 1.0, "stats must not contain NaN or infinity"),
    ],
)
def test_clip_frobenius_bad_input(stats_, max_norm, message):
    with pytest.raises(ValueError, match=message):
        clip_frobenius(stats_, max_norm)


# Gaussian mechanism --------------------------------------------------------


def assert_normal_sample(sample, std):
    """Sample mean and variance consistent with N(0, std**2) at TAIL_PROBABILITY."""
    sample = np.ravel(sample)
    n = sample.size
    z = stats.norm.isf(TAIL_PROBABILITY / 2)
    assert abs(sample.mean()) <= z * std / math.sqrt(n)
    # (n - 1) s**2 / std**2 is chi-square with n - 1 degrees of freedom.
    statistic = (n - 1) * sample.var(ddof=1) / std**2
    low, high = stats.chi2.ppf([TAIL_PROBABILITY / 2, 1 - TAIL_PROBABILITY / 2], n - 1)
    assert low <= statistic <= high, (statistic, low, high)


def test_gaussian_noise_scales_formula():
    sensitivities = [0.5, 2.0, 0.1]
    scales = gaussian_noise_scales(sensitivities, 1.3)
    np.testing.assert_allclose(scales, 1.3 * math.sqrt(3) * np.array(sensitivities))
    np.testing.assert_array_equal(gaussian_noise_scales([2.0], 0.0), [0.0])


def test_gaussian_mechanism_noise_std_per_block():
    sensitivities = [0.5, 2.0, 0.1]
    noise_multiplier = 1.3
    mean_sum = np.arange(400.0).reshape(20, 20)
    second_moment = np.eye(30)
    count = np.array(7.0)
    blocks = [mean_sum, second_moment, count]
    originals = [block.copy() for block in blocks]
    rng = np.random.RandomState(0)
    noise = [[], [], []]
    for _ in range(200):
        noisy = gaussian_mechanism(
            blocks,
            sensitivities,
            noise_multiplier,
            symmetric=[False, True, False],
            random_state=rng,
        )
        for i, (block, released) in enumerate(zip(blocks, noisy, strict=True)):
            assert released.shape == block.shape
            assert released is not block
            noise[i].append(released - block)
        np.testing.assert_array_equal(noisy[1], noisy[1].T)
    for block, original in zip(blocks, originals, strict=True):
        np.testing.assert_array_equal(block, original)
    stds = noise_multiplier * math.sqrt(3) * np.array(sensitivities)
    assert_normal_sample(noise[0], stds[0])
    upper = np.triu_indices(30)
    assert_normal_sample([n[upper] for n in noise[1]], stds[1])
    assert_normal_sample(noise[2], stds[2])


def test_gaussian_mechanism_zero_noise_and_reproducibility():
    blocks = [np.ones(3), np.eye(2)]
    released = gaussian_mechanism(blocks, [1.0, 1.0], 0.0, symmetric=[False, True])
    for block, out in zip(blocks, released, strict=True):
        np.testing.assert_array_equal(out, block)
        assert out is not block
    first = gaussian_mechanism(blocks, [1.0, 2.0], 1.0, random_state=0)
    second = gaussian_mechanism(blocks, [1.0, 2.0], 1.0, random_state=0)
    for a, b in zip(first, second, strict=True):
        np.testing.assert_array_equal(a, b)
    generator_draws = gaussian_mechanism(
        blocks, [1.0, 2.0], 1.0, random_state=np.random.default_rng(0)
    )
    assert all(np.all(np.isfinite(block)) for block in generator_draws)


@pytest.mark.parametrize(
    "draw",
    [
        lambda: two_sided_geometric(1.0, size=1000),
        lambda: gaussian_mechanism([np.zeros(50), np.zeros((5, 5))], [1.0, 1.0], 1.0,
                                   symmetric=[False, True])[0],
        lambda: symmetric_gaussian_noise(10, 1.0),
    ],
    ids=["two_sided_geometric", "gaussian_mechanism", "symmetric_gaussian_noise"],
)
def test_unseeded_noise_is_not_replayed_by_numpy_global_seed(draw):
    draws = []
    for _ in range(2):
        np.random.seed(0)
        draws.append(draw())
    assert not np.array_equal(*draws)


@pytest.mark.parametrize("secure", [False, True])
def test_a_symmetric_block_is_released_as_its_symmetric_part(secure):
    # Mirrored noise on an asymmetric block would release A - A.T unnoised.
    A = np.arange(9.0).reshape(3, 3)
    quiet, noisy = (
        gaussian_mechanism([A], [1.0], multiplier, symmetric=[True], secure=secure)[0]
        for multiplier in (1e-9 if secure else 0.0, 100.0)
    )
    # the secure release rounds to its grid (step below 1e-3)
    np.testing.assert_allclose(quiet, (A + A.T) / 2, atol=1e-3 if secure else 0)
    np.testing.assert_array_equal(noisy, noisy.T)
    assert np.abs(noisy - (A + A.T) / 2).max() > 10  # the noise is there


def test_symmetric_gaussian_noise_law():
    n_features, scale = 12, 0.7
    rng = np.random.RandomState(1)
    draws = np.array(
        [
            symmetric_gaussian_noise(n_features, scale, random_state=rng)
            for _ in range(3000)
        ]
    )
    for draw in draws[:10]:
        np.testing.assert_array_equal(draw, draw.T)
    diagonal = draws[:, np.arange(n_features), np.arange(n_features)]
    rows, cols = np.triu_indices(n_features, k=1)
    off_diagonal = draws[:, rows, cols]
    # Analyze-Gauss: the same variance on and off the diagonal.
    assert_normal_sample(diagonal, scale)
    assert_normal_sample(off_diagonal, scale)
    # Distinct upper-triangle entries are independent: no correlation between
    # two neighbouring ones.
    correlation = np.corrcoef(off_diagonal[:, 0], off_diagonal[:, 1])[0, 1]
    assert abs(correlation) < stats.norm.isf(TAIL_PROBABILITY / 2) / math.sqrt(3000)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(sensitivities=[1.0], noise_multiplier=-1.0), "noise_multiplier must be"),
        (
            dict(sensitivities=[1.0], noise_multiplier=np.nan),
            "noise_multiplier must be",
        ),
        (
            dict(sensitivities=[1.0], noise_multiplier=np.inf),
            "noise_multiplier must be",
        ),
        (
            dict(sensitivities=[0.0], noise_multiplier=1.0),
            "sensitivities must be positive",
        ),
        (
            dict(sensitivities=[-1.0], noise_multiplier=1.0),
            "sensitivities must be positive",
        ),
        (
            dict(sensitivities=[np.inf], noise_multiplier=1.0),
            "sensitivities must be positive",
        ),
        (
            dict(sensitivities=[], noise_multiplier=1.0),
            "sensitivities must be a non-empty",
        ),
        (
            dict(sensitivities=[[1.0]], noise_multiplier=1.0),
            "sensitivities must be a non-empty",
        ),
    ],
)
def test_gaussian_noise_scales_bad_input(kwargs, message):
    with pytest.raises(ValueError, match=message):
        gaussian_noise_scales(**kwargs)


@pytest.mark.parametrize(
    "args, kwargs, message",
    [
        (([np.ones(2)], [1.0, 2.0], 1.0), {}, "Got 1 blocks but 2 sensitivities"),
        (
            ([np.ones(2), np.ones(2)], [1.0], 1.0),
            {},
            "Got 2 blocks but 1 sensitivities",
        ),
        (
            ([np.ones(2)], [1.0], 1.0),
            dict(symmetric=[True, False]),
            "Got 1 blocks but 2 symmetric flags",
        ),
        (
            ([np.ones((2, 3))], [1.0], 1.0),
            dict(symmetric=[True]),
            "must be a square matrix",
        ),
        (([np.ones(3)], [1.0], 1.0), dict(symmetric=[True]), "must be a square matrix"),
        (([np.ones(3)], [1.0], 1.0), dict(symmetric=["yes"]), "must be a bool"),
        (([np.array([np.nan])], [1.0], 1.0), {}, "blocks\\[0\\] must not contain NaN"),
        ((np.ones(3), [1.0], 1.0), {}, "blocks must be a sequence"),
        (([np.ones(2)], [1.0], -0.5), {}, "noise_multiplier must be"),
        (([np.ones(2)], [0.0], 1.0), {}, "sensitivities must be positive"),
        (
            ([np.ones(2)], [1.0], 1.0),
            dict(random_state="seed"),
            "cannot be used to seed",
        ),
    ],
)
def test_gaussian_mechanism_bad_input(args, kwargs, message):
    with pytest.raises(ValueError, match=message):
        gaussian_mechanism(*args, **kwargs)


@pytest.mark.parametrize(
    "args, message",
    [
        ((0, 1.0), "n_features must be an integer >= 1"),
        ((2.5, 1.0), "n_features must be an integer >= 1"),
        ((3, -1.0), "scale must be a non-negative finite number"),
        ((3, np.nan), "scale must be a non-negative finite number"),
    ],
)
def test_symmetric_gaussian_noise_bad_input(args, message):
    with pytest.raises(ValueError, match=message):
        symmetric_gaussian_noise(*args)


# PSD projection ------------------------------------------------------------


@pytest.mark.parametrize("floor", [0.0, 0.5])
def test_project_psd_floors_eigenvalues(floor):
    rng = np.random.RandomState(4)
    A = rng.normal(size=(15, 15))  # not symmetric, eigenvalues of both signs
    projected = project_psd(A, floor=floor)
    np.testing.assert_array_equal(projected, projected.T)
    symmetric_eigenvalues = np.linalg.eigvalsh((A + A.T) / 2)
    assert symmetric_eigenvalues.min() < floor
    eigenvalues = np.linalg.eigvalsh(projected)
    tolerance = 1e-12 * np.abs(symmetric_eigenvalues).max()
    assert eigenvalues.min() >= floor - tolerance
    # Eigenvalues at or above the floor are kept, the others raised to it.
    np.testing.assert_allclose(
        eigenvalues, np.maximum(symmetric_eigenvalues, floor), atol=tolerance
    )


def test_project_psd_leaves_psd_matrix_unchanged():
    rng = np.random.RandomState(5)
    B = rng.normal(size=(10, 10))
    A = B @ B.T + np.eye(10)
    A = (A + A.T) / 2
    np.testing.assert_array_equal(project_psd(A), A)
    np.testing.assert_array_equal(project_psd(A, floor=0.5), A)


@pytest.mark.parametrize(
    "matrix, floor, message",
    [
        (np.ones((2, 3)), 0.0, "matrix must be a non-empty square 2-D array"),
        (np.ones(3), 0.0, "matrix must be a non-empty square 2-D array"),
        (np.ones((0, 0)), 0.0, "matrix must be a non-empty square 2-D array"),
        (np.array([[np.nan]]), 0.0, "matrix must not contain NaN or infinity"),
        (np.eye(2), -1.0, "floor must be a non-negative finite number"),
        (np.eye(2), np.inf, "floor must be a non-negative finite number"),
    ],
)
def test_project_psd_bad_input(matrix, floor, message):
    with pytest.raises(ValueError, match=message):
        project_psd(matrix, floor)


# Two-sided geometric noise -------------------------------------------------

N_DRAWS = 10**6


def geometric_pmf(noise_ratio, t):
    """Exact pmf of 2Geo(exp(-noise_ratio)) at the integers t."""
    alpha = math.exp(-noise_ratio)
    normaliser = -math.expm1(-noise_ratio) / (1 + alpha)
    return normaliser * np.exp(-noise_ratio * np.abs(t))


def pooled_bins(noise_ratio, n_draws, min_expected=5.0):
    """Bins for a chi-square test: integers -S+1..S-1 and the tails t <= -S, t >= S.

    S is chosen so that every bin's expected count is at least min_expected.
    Returns S and the bin probabilities, in the order tail, -S+1, ..., S-1, tail.
    """
    alpha = math.exp(-noise_ratio)
    single = 0
    while n_draws * geometric_pmf(noise_ratio, single + 1) >= min_expected:
        single += 1
    assert n_draws * geometric_pmf(noise_ratio, single) >= min_expected

    def tail_mass(start):  # P(tau >= start) for start >= 1
        return alpha**start / (1 + alpha)

    start = single + 1 if n_draws * tail_mass(single + 1) >= min_expected else single
    assert start >= 1
    inner = geometric_pmf(noise_ratio, np.arange(-start + 1, start))
    probabilities = np.concatenate([[tail_mass(start)], inner, [tail_mass(start)]])
    return start, probabilities


def chi_square_pvalue(draws, noise_ratio):
    start, probabilities = pooled_bins(noise_ratio, draws.size)
    observed = np.bincount(
        np.clip(draws, -start, start) + start, minlength=2 * start + 1
    )
    # The bins cover the integers exactly once, so the masses sum to 1.
    np.testing.assert_allclose(probabilities.sum(), 1.0, rtol=1e-12)
    expected = draws.size * probabilities
    assert expected.min() >= 5.0
    # Rescale away the last ulps, which chisquare would reject.
    return stats.chisquare(observed, expected * draws.size / expected.sum()).pvalue


def draw_noise(epsilon, sensitivity, sampler, seed, size=N_DRAWS):
    if sampler == "numpy":
        return two_sided_geometric(epsilon, sensitivity, size=size, random_state=seed)
    return two_sided_geometric(
        epsilon, sensitivity, size=size, secure=True, random_state=random.Random(seed)
    )


# epsilon=2e-4 has a denominator of 2**65, beyond one 64-bit word.
GEOMETRIC_CASES = [(0.1, 1), (1.0, 1), (3.0, 1), (2.0, 3), (2e-4, 1)]


@pytest.mark.parametrize("sampler", ["numpy", "secure"])
@pytest.mark.parametrize("epsilon, sensitivity", GEOMETRIC_CASES)
def test_two_sided_geometric_matches_exact_pmf(epsilon, sensitivity, sampler):
    # 10**6 draws for both samplers: the secure one draws about 10**6 per second.
    draws = draw_noise(epsilon, sensitivity, sampler, seed=12345)
    assert draws.dtype == np.int64 and draws.shape == (N_DRAWS,)
    pvalue = chi_square_pvalue(draws, epsilon / sensitivity)
    print(f"\n{sampler} epsilon={epsilon} N={sensitivity}: chi-square p = {pvalue:.4f}")
    assert pvalue > 1e-3


@pytest.mark.parametrize("sampler", ["numpy", "secure"])
@pytest.mark.parametrize("epsilon, sensitivity", GEOMETRIC_CASES)
def test_chi_square_test_rejects_ten_percent_error(epsilon, sensitivity, sampler):
    # The goodness-of-fit test has power: draws at 1.1 * epsilon fail it.
    draws = draw_noise(1.1 * epsilon, sensitivity, sampler, seed=54321)
    pvalue = chi_square_pvalue(draws, epsilon / sensitivity)
    assert pvalue < 1e-6


def test_two_sided_geometric_shapes_and_sources():
    assert two_sided_geometric(1.0, random_state=0).shape == ()
    assert two_sided_geometric(1.0, secure=True).shape == ()
    assert two_sided_geometric(1.0, size=(2, 0, 3), secure=True).shape == (2, 0, 3)
    assert two_sided_geometric(1.0, size=4, random_state=0).dtype == np.int64
    np.testing.assert_array_equal(
        two_sided_geometric(0.5, 2, size=50, random_state=3),
        two_sided_geometric(0.5, 2, size=50, random_state=np.random.RandomState(3)),
    )
    np.testing.assert_array_equal(
        two_sided_geometric(0.5, size=50, secure=True, random_state=random.Random(3)),
        two_sided_geometric(0.5, size=50, secure=True, random_state=random.Random(3)),
    )
    generator_draws = two_sided_geometric(
        0.5, size=50, random_state=np.random.default_rng(3)
    )
    assert generator_draws.dtype == np.int64
    # A huge epsilon gives no noise: alpha underflows to 0.
    np.testing.assert_array_equal(two_sided_geometric(1e300, size=20, secure=True), 0)
    np.testing.assert_array_equal(
        two_sided_geometric(800.0, size=20, random_state=0), 0
    )


def test_secure_sampler_on_a_scripted_source():
    # A source of all-one bytes makes every uniform draw take its largest
    # k-bit value. With epsilon = 0.5 = 1/2 (n = 1, d = 2): U = randbelow(2) = 1
    # is kept, as Bernoulli(1 / (2 K)) = [randbelow(2) < 1] fails at K = 1
    # (odd); each Bernoulli(exp(-1)) fails at K = 2 (randbelow(2) = 1 != 0,
    # even), so V = 0; Y = (1 + 2 * 0) // 1 = 1 and the sign bit is 1.
    class AllOnes(random.Random):
        def randbytes(self, n):
            return b"\xff" * n

    np.testing.assert_array_equal(
        two_sided_geometric(0.5, size=3, secure=True, random_state=AllOnes()), -1
    )


@pytest.mark.parametrize(
    "args, kwargs, message",
    [
        ((0.0,), {}, "epsilon must be a positive number"),
        ((-1.0,), {}, "epsilon must be a positive number"),
        ((np.nan,), {}, "epsilon must be a positive number"),
        ((np.inf,), {}, "epsilon must be a positive finite number"),
        ((1.0, 0), {}, "sensitivity must be an integer >= 1"),
        ((1.0, 1.5), {}, "sensitivity must be an integer >= 1"),
        ((1.0, True), {}, "sensitivity must be an integer >= 1"),
        ((1e-13,), {}, "overflow int64"),
        ((1.0, 1, -1), {}, "size must be None, a non-negative int"),
        ((1.0, 1, (2, 1.5)), {}, "size must be None, a non-negative int"),
        ((1.0,), dict(secure="yes"), "secure must be a bool"),
        ((1.0,), dict(secure=True, random_state=0), "random.Random instance"),
        (
            (1.0,),
            dict(secure=True, random_state=np.random.RandomState(0)),
            "random.Random instance",
        ),
        ((1.0,), dict(random_state=random.Random(0)), "only by the secure sampler"),
        ((1.0,), dict(random_state="seed"), "cannot be used to seed"),
    ],
)
def test_two_sided_geometric_bad_input(args, kwargs, message):
    with pytest.raises(ValueError, match=message):
        two_sided_geometric(*args, **kwargs)


@pytest.mark.parametrize("size", [1, 5, 40])
def test_secure_release_noise_scale_and_grid_are_the_proven_ones(
    discrete_gaussian_calls, size
):
    # The secure Gaussian mechanism rounds each block to a power-of-two grid
    # whose rounding moves it by at most _SECURE_GRID_FRACTION times the
    # sensitivity (the finest such power, for accuracy), and draws discrete
    # Gaussian noise of std (1 + that fraction) times the continuous one, in
    # grid steps. A smaller std, or a coarser grid than the proof allows, is
    # caught exactly (a statistical test of the noise would not see 0.2%).
    sensitivity, multiplier = 0.7, 3.0
    released = mechanisms.gaussian_mechanism(
        [np.linspace(-1, 1, size)], [sensitivity], multiplier, secure=True,
        random_state=random.Random(0),
    )[0]
    fraction = mechanisms._SECURE_GRID_FRACTION
    ((sigma_in_steps, _),) = discrete_gaussian_calls
    step = multiplier * sensitivity * (1 + fraction) / sigma_in_steps
    assert math.log2(step) == round(math.log2(step))  # a power of two
    assert step * math.sqrt(size) <= fraction * sensitivity < 2 * step * math.sqrt(size)
    np.testing.assert_array_equal(released / step, np.rint(released / step))
