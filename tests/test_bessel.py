"""The Bessel distribution kernels against mpmath/scipy, and the noisy-count
likelihood against a brute-force convolution."""

import math

import mpmath
import numpy as np
import pytest
from numba import njit
from scipy import stats
from scipy.special import gammaln, ive

from skprivfact.poisson_mf._bessel import (
    _inverse_from_normalizer,
    bessel_draw,
    bessel_log_normalizer,
    bessel_logpmf,
    bessel_mean,
    bessel_mode,
    bessel_sample_many,
)
from skprivfact.poisson_mf._likelihood import (
    _noisy_logpmf_row,
    log_poisson_cdf_sf,
    noisy_count_logpmf,
    noisy_loglik_sum,
)
from skprivfact.poisson_mf._noisy_count import N_LANE_BUFFERS

NUS = [0, 1, 5, 50, 500, 10**4]
AS = [1e-3, 0.5, 5, 50, 500, 1e5]
mpmath.mp.dps = 40


def _mp_log_normalizer(nu, a):
    """log I_nu(a): scipy's exponentially scaled ive where it neither
    underflows nor loses digits, mpmath's series elsewhere."""
    scaled = ive(nu, a)
    if a >= 1e4 and np.isfinite(scaled) and scaled > 1e-250:
        return float(np.log(scaled) + a)
    return float(_mp_log_normalizer_and_mean(nu, a)[0])


def _mp_log_normalizer_and_mean(nu, a):
    """(log I_nu(a), mean) in 40-digit arithmetic: mpmath's besseli, or where
    its hypergeometric series does not converge (a and nu both >= 1e4), the
    Bessel series summed term by term from its largest term outward."""
    a_ = mpmath.mpf(a)
    try:
        i_nu = mpmath.besseli(nu, a_)
        return mpmath.log(i_nu), a_ / 2 * mpmath.besseli(nu + 1, a_) / i_nu
    except mpmath.libmp.libhyper.NoConvergence:
        pass
    half_a_sq = a_**2 / 4
    mode = int(mpmath.floor((mpmath.sqrt(a_**2 + nu**2) - nu) / 2))
    log_mode_term = (2 * mode + nu) * mpmath.log(a_ / 2) - mpmath.loggamma(
        mode + 1) - mpmath.loggamma(mode + nu + 1)
    total, first = mpmath.mpf(1), mpmath.mpf(mode)
    weight, m = mpmath.mpf(1), mode
    while weight > mpmath.mpf(10) ** -30:
        weight *= half_a_sq / ((m + 1) * (m + nu + 1))
        m += 1
        total += weight
        first += m * weight
    weight, m = mpmath.mpf(1), mode
    while m > 0 and weight > mpmath.mpf(10) ** -30:
        weight *= m * (m + nu) / half_a_sq
        m -= 1
        total += weight
        first += m * weight
    return log_mode_term + mpmath.log(total), first / total


@pytest.mark.parametrize("nu", NUS + [1e5])
@pytest.mark.parametrize("a", AS + [1e-8, 1e6])
def test_mode_mean_normalizer_match_mpmath(nu, a):
    exact_mode = mpmath.floor((mpmath.sqrt(mpmath.mpf(a) ** 2 + nu**2) - nu) / 2)
    assert bessel_mode(float(nu), a) == float(exact_mode)
    # The mode is an argmax of the pmf (a = 50, nu = 0 is a tie: 25 * 25 = (a/2)**2).
    mode = bessel_mode(float(nu), a)
    at_mode = bessel_logpmf(mode, float(nu), a)
    slack = 1e-12 * abs(at_mode)
    assert at_mode >= bessel_logpmf(mode + 1, float(nu), a) - slack
    if mode > 0:
        assert at_mode >= bessel_logpmf(mode - 1, float(nu), a) - slack
    exact_mean = float(_mp_log_normalizer_and_mean(nu, a)[1])
    assert bessel_mean(float(nu), a) == pytest.approx(exact_mean, rel=1e-9, abs=1e-300)
    log_norm = _mp_log_normalizer(nu, a)
    assert bessel_log_normalizer(float(nu), a) == pytest.approx(
        log_norm, rel=1e-12, abs=1e-9
    )


def test_logpmf_sums_to_one_and_outside_support():
    # float64 lgamma near 5e5 carries an absolute error ~1e-10, hence the
    # looser tolerance of the last case
    for nu, a, tol in [(0.0, 3.0, 1e-12), (7.0, 40.0, 1e-12), (0.0, 1e-8, 1e-12),
                       (1e5, 1e6, 1e-8)]:
        mode = bessel_mode(nu, a)
        grid = np.arange(max(0.0, mode - 5000), mode + 5000)
        total = np.exp([bessel_logpmf(m, nu, a) for m in grid]).sum()
        assert total == pytest.approx(1.0, rel=tol)
    assert bessel_logpmf(-1.0, 2.0, 1.0) == -np.inf
    assert bessel_logpmf(1.5, 2.0, 1.0) == -np.inf


@pytest.mark.parametrize("nu", NUS)
@pytest.mark.parametrize("a", AS)
def test_sampler_goodness_of_fit(nu, a):
    n_draws = 100_000
    draws = bessel_sample_many(float(nu), a, n_draws, 12345)
    assert np.all(draws >= 0) and np.all(np.isfinite(draws))
    assert np.all(draws == np.floor(draws))
    # exact pmf from scipy's gammaln and mpmath's normalizer (independent of ours)
    lo, hi = int(draws.min()), int(draws.max())
    pad = 50 + int(12 * math.sqrt(draws.mean() + 1))
    support = np.arange(max(0, lo - pad), hi + pad + 1, dtype=np.float64)
    logpmf = (
        (2 * support + nu) * math.log(a / 2)
        - gammaln(support + 1)
        - gammaln(support + nu + 1)
        - _mp_log_normalizer(nu, a)
    )
    expected = n_draws * np.exp(logpmf)
    observed = np.bincount((draws - support[0]).astype(np.int64), minlength=support.size)
    # pool cells with small expectations into their neighbours from each tail
    cells_obs, cells_exp = [], []
    acc_o = acc_e = 0.0
    for o, e in zip(observed, expected):
        acc_o += o
        acc_e += e
        if acc_e >= 20:
            cells_obs.append(acc_o)
            cells_exp.append(acc_e)
            acc_o = acc_e = 0.0
    if cells_exp:
        cells_obs[-1] += acc_o
        cells_exp[-1] += acc_e
    else:
        cells_obs, cells_exp = [acc_o], [acc_e]
    cells_exp = np.array(cells_exp)
    cells_obs = np.array(cells_obs)
    # the mass outside the window is below 1e-15: the expectations sum to n
    assert cells_exp.sum() == pytest.approx(n_draws, rel=1e-9)
    if cells_exp.size == 1:
        assert cells_obs[0] == n_draws
        return
    cells_exp *= n_draws / cells_exp.sum()
    pvalue = stats.chisquare(cells_obs, cells_exp).pvalue
    assert pvalue > 1e-3


@njit
def _draws_both_ways(nu, a, uniforms):
    """Draws at the same uniforms from bessel_draw (decided by tail bounds)
    and from the inversion that sums the normaliser first."""
    half_a_sq = 0.25 * a * a
    mode = bessel_mode(nu, a)
    lazy = np.empty(uniforms.shape[0])
    full = np.empty(uniforms.shape[0])
    for i in range(uniforms.shape[0]):
        lazy[i] = bessel_draw(nu, half_a_sq, uniforms[i])
        full[i] = _inverse_from_normalizer(nu, half_a_sq, mode, uniforms[i])
    return lazy, full


@pytest.mark.parametrize("nu", [0.0, 1.0, 2.0, 7.0, 500.0, 1e5])
def test_tail_bounds_decide_as_the_normalised_inversion(nu):
    # a fine grid too, up to 1 - 1e-12 (closer to 1 the target is within
    # rounding of the total and the normalised inversion is in its dropped tail)
    uniforms = np.concatenate([
        np.random.default_rng(int(nu)).random(5_000),
        np.linspace(0.0, 1.0 - 1e-12, 1_001),
    ])
    for a in [1e-8, 1e-3, 0.5, 1.13, 2.0, 3.0, 9.0, 50.0, 1e3, 1e6]:
        lazy, full = _draws_both_ways(nu, a, uniforms)
        np.testing.assert_array_equal(lazy, full)


def test_sampler_extremes_never_nan_or_negative():
    for nu, a in [(1e5, 1e-8), (0.0, 1e-8), (1e5, 1e6), (0.0, 1e6), (3.0, 0.0)]:
        draws = bessel_sample_many(nu, a, 2000, 1)
        assert np.all(np.isfinite(draws)) and np.all(draws >= 0)
        assert abs(draws.mean() - bessel_mean(nu, a)) <= 6 * math.sqrt(
            max(bessel_mean(nu, a), 1.0) / 2000
        ) * 2 + 1e-12


@pytest.mark.parametrize("k", [-3.0, 0.0, 2.0, 40.0, 1000.0])
@pytest.mark.parametrize("rate", [1e-6, 0.7, 40.0, 5000.0])
def test_poisson_cdf_sf_match_scipy(k, rate):
    log_cdf, log_sf = log_poisson_cdf_sf(k, rate)
    if k < 0:
        assert log_cdf == -np.inf and log_sf == 0.0
        return
    cdf = mpmath.gammainc(k + 1, rate, mpmath.inf, regularized=True)
    sf = mpmath.gammainc(k + 1, 0, rate, regularized=True)
    assert log_cdf == pytest.approx(float(mpmath.log(cdf)), rel=1e-10, abs=1e-12)
    assert log_sf == pytest.approx(float(mpmath.log(sf)), rel=1e-10, abs=1e-12)


def _brute_force_noisy_logpmf(k, mu, alpha):
    # sum over y of Poisson(y; mu) 2Geo(k - y; alpha), in mpmath
    mpmath.mp.dps = 50
    mu_, alpha_ = mpmath.mpf(mu), mpmath.mpf(alpha)
    total = mpmath.mpf(0)
    y_max = int(mu + 60 * math.sqrt(mu + 1) + 200)
    for y in range(y_max):
        total += (
            mpmath.exp(-mu_ + y * mpmath.log(mu_) - mpmath.loggamma(y + 1))
            * (1 - alpha_) / (1 + alpha_) * alpha_ ** abs(k - y)
        )
    return float(mpmath.log(total))


@pytest.mark.parametrize("k", [-25, -1, 0, 1, 3, 30])
@pytest.mark.parametrize("mu", [1e-4, 0.3, 4.0, 60.0])
@pytest.mark.parametrize("alpha", [0.05, math.exp(-1), 0.9])
def test_noisy_count_logpmf_matches_convolution(k, mu, alpha):
    assert noisy_count_logpmf(float(k), mu, alpha) == pytest.approx(
        _brute_force_noisy_logpmf(k, mu, alpha), rel=1e-10, abs=1e-10
    )


def test_noisy_count_pmf_normalizes():
    for mu, alpha in [(0.5, 0.3), (20.0, math.exp(-0.5))]:
        ks = np.arange(-400, 600, dtype=np.float64)
        total = np.exp([noisy_count_logpmf(k, mu, alpha) for k in ks]).sum()
        assert total == pytest.approx(1.0, rel=1e-12)


@pytest.mark.parametrize("alpha", [0.05, math.exp(-1), 0.9, 0.995])
def test_row_pass_of_noisy_logpmf_matches_scalar(alpha):
    # counts of both signs, rates from 0 to far above the row pass's range,
    # sums that outlast its terms, and the small values that dominate real data
    rng = np.random.default_rng(int(alpha * 1000))
    counts = np.concatenate([rng.integers(-3, 6, 3000), rng.integers(-40, 60, 3000),
                             [0, 12, 13, -12, -13, 5, 0, 3, 1e6, 90, 2, 2]]).astype(np.float64)
    rates = np.concatenate([np.exp(rng.uniform(-3, 1, 3000)),
                            np.exp(rng.uniform(np.log(1e-12), np.log(500), 3000)),
                            [0.0, 1e-300, 4.0, 4.0, 300 * alpha, 1e6, 1e-30, 1e-30,
                             0.5, 63 * alpha, 64 * alpha, 64.1 * alpha]])
    out = np.empty(counts.size)
    _noisy_logpmf_row(counts, rates, alpha, math.log(alpha),
                      math.log1p(-alpha) - math.log1p(alpha), out,
                      np.empty((N_LANE_BUFFERS, counts.size)),
                      np.empty((3, counts.size), dtype=np.int64))
    expected = np.array([noisy_count_logpmf(k, mu, alpha) for k, mu in zip(counts, rates)])
    finite = np.isfinite(expected)
    np.testing.assert_array_equal(np.isfinite(out), finite)
    np.testing.assert_array_equal(out[~finite], expected[~finite])
    np.testing.assert_allclose(out[finite], expected[finite], rtol=1e-13, atol=1e-13)


def test_noisy_loglik_sum_is_the_sum_of_logpmfs():
    rng = np.random.default_rng(3)
    row_factors = rng.gamma(0.3, size=(30, 4))
    components = rng.gamma(0.3, size=(4, 50))
    noisy = rng.integers(-5, 20, size=(30, 50)).astype(np.float64)
    alpha = math.exp(-0.7)
    rates = row_factors @ components
    expected = sum(noisy_count_logpmf(k, mu, alpha) for k, mu in zip(noisy.ravel(), rates.ravel()))
    assert noisy_loglik_sum(noisy, row_factors, components, alpha) == pytest.approx(
        expected, rel=1e-13)
