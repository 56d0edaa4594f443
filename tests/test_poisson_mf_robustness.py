"""PrivatePoissonMF: extreme noise and counts finish, fits survive fork(), and
the noise-free fit meets NMF's expectations on count data."""

import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.special import kl_div
from sklearn.decomposition import NMF
from sklearn.exceptions import ConvergenceWarning

from skprivfact.datasets import get_data_home, make_poisson_factorization
from skprivfact.mechanisms import two_sided_geometric
from skprivfact.poisson_mf import PrivatePoissonMF
from skprivfact.poisson_mf._evaluation import reconstruction_error
from skprivfact.poisson_mf._noisy_count import posterior_count_moments

ROOT = Path(__file__).resolve().parents[1]


def _run_python(code, timeout, **environment):
    """Run ``code`` in a fresh interpreter on this checkout (``environment``
    added to its variables); a hang fails the test at ``timeout`` seconds
    instead of stalling the suite."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), **environment}
    try:
        done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"no result after {timeout} s")
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_epsilon_below_the_limit_is_a_clear_error():
    X = np.ones((5, 4))
    with pytest.raises(ValueError, match="below 1e-06"):
        PrivatePoissonMF(2, epsilon=1e-7).fit(X)
    with pytest.raises(ValueError, match="below 1e-06"):
        PrivatePoissonMF(2, epsilon=1e-5, sensitivity=100).fit(X)


@pytest.mark.parametrize("epsilon", [701.0, 750.0, 1e6])
def test_epsilon_above_the_limit_is_a_clear_error(epsilon):
    # exp(-epsilon) leaves the normal floats there: score() was NaN from
    # about 709 and fit divided by zero from 745.
    X = np.ones((5, 4))
    with pytest.raises(ValueError, match="above 700.*epsilon=None"):
        PrivatePoissonMF(2, epsilon=epsilon).fit(X)
    model = PrivatePoissonMF(2, epsilon=700.0, max_iter=5, random_state=0).fit(X)
    assert np.isfinite(model.score(X))


def test_a_nan_rate_gives_a_nan_log_likelihood_not_a_hang():
    # A broken fit's rate must not stop the objective's tail sums from ending.
    out = _run_python(
        """
        import math
        import numpy as np
        from skprivfact.poisson_mf._likelihood import noisy_count_logpmf, noisy_loglik_sum
        print(noisy_count_logpmf(3.0, math.nan, 0.5))
        noisy = np.array([[3, -1], [0, 2]])
        print(noisy_loglik_sum(noisy, np.array([[math.nan], [1.0]]), np.ones((1, 2)), 0.5))
        """,
        timeout=60,
    )
    assert out.split() == ["nan", "nan"]


def test_rows_inferred_with_fixed_components_keep_rates_beyond_single_precision():
    # With a very sparse factor prior, the sub-count ratios of rows inferred
    # with the components held fixed (transform, and the fit's count scale)
    # reach 1e42 against rates of 1e-45: in single precision they overflow
    # (an earlier change rounded them to float32 and every row became NaN).
    _, X, _, _ = make_poisson_factorization(
        300, 50, 3, factor_shape=0.5, epsilon=1.0, random_state=2
    )
    model = PrivatePoissonMF(
        3, epsilon=1.0, max_iter=30, random_state=0, factor_prior_shape=0.01
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        factors = model.fit_transform(X)
    assert np.isfinite(factors).all()
    assert 0.5 < model.count_scale_ < 2.0


def test_true_count_moments_take_bounded_work_at_any_scale():
    # the per-entry work behind CAVI and MCMC at tiny epsilon and huge
    # counts: the moments stay exact where a direct sum would need ~1e6 terms
    alpha = np.exp(-1e-6)
    mean, var = posterior_count_moments(2e6, 1.0, alpha)
    assert mean == pytest.approx(1.0, rel=1e-5) and var == pytest.approx(1.0, rel=1e-5)
    mean, var = posterior_count_moments(1e12, 1e12, np.exp(-1.0))
    assert mean == pytest.approx(1e12, rel=1e-12) and 1.0 < var < 3.0
    # far from the kink: Poisson(r alpha) above the count
    mean, var = posterior_count_moments(3.0, 1e12, np.exp(-1.0))
    assert mean == pytest.approx(1e12 * np.exp(-1.0), rel=1e-9)
    assert var == pytest.approx(1e12 * np.exp(-1.0), rel=1e-3)


@pytest.mark.parametrize("solver", ["cavi", "mcmc"])
def test_tiny_epsilon_single_row_and_huge_counts_finish(solver, tmp_path):
    X, _, _, _ = make_poisson_factorization(200, 20, 3, factor_shape=1.0, random_state=0)
    fits = {
        "epsilon 1e-6": (X + two_sided_geometric(1e-6, 1, X.shape, random_state=0), 1e-6),
        "one row": (X[:1] + two_sided_geometric(1.0, 1, (1, 20), random_state=0), 1.0),
        "counts near 1e12": (X * 10**11 + two_sided_geometric(1.0, 1, X.shape, random_state=0),
                             1.0),
    }
    for name, (noisy, epsilon) in fits.items():
        np.save(tmp_path / f"{name.replace(' ', '_')}.npy", noisy)
    code = f"""
        import warnings
        import numpy as np
        from skprivfact.poisson_mf import PrivatePoissonMF
        warnings.simplefilter("ignore")
        for name, epsilon in {[(name, eps) for name, (_, eps) in fits.items()]!r}:
            X = np.load(f"{tmp_path}/{{name.replace(' ', '_')}}.npy")
            model = PrivatePoissonMF(3, epsilon=epsilon, solver={solver!r}, n_burn_in=100,
                                     n_kept_samples=50, random_state=0)
            rates = model.fit_transform(X) @ model.components_
            assert np.all(np.isfinite(rates)), name
            print(name, float(rates.sum() / max(X.sum(), 1.0)))
    """
    out = _run_python(code, timeout=120)
    ratios = dict(line.rsplit(" ", 1) for line in out.strip().splitlines())
    # the huge counts are fitted, not lost to the noise
    assert float(ratios["counts near 1e12"]) == pytest.approx(1.0, rel=0.05)


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux's /proc")
def test_small_fits_start_no_thread_pool():
    # a parallel region's barrier waits for a descheduled thread on a busy
    # machine: small calls run the serial twins, large ones the thread pool
    code = """
        import os
        import warnings
        from skprivfact.datasets import make_poisson_factorization
        from skprivfact.poisson_mf import PrivatePoissonMF, _parallel
        warnings.simplefilter("ignore")
        X, X_noisy, _, _ = make_poisson_factorization(40, 12, 2, factor_shape=1.0,
                                                      epsilon=2.0, random_state=0)
        def fit_both():
            for solver in ("cavi", "mcmc"):
                PrivatePoissonMF(2, epsilon=2.0, solver=solver, max_iter=10,
                                 n_burn_in=10, n_kept_samples=5, random_state=0).fit(X_noisy)
            return len(os.listdir("/proc/self/task"))
        print(len(os.listdir("/proc/self/task")))  # BLAS's threads among them
        print(fit_both())
        _parallel.MIN_PARALLEL_WORK = 0
        print(fit_both())
    """
    # Two numba threads whatever the environment says (NUMBA_NUM_THREADS=1
    # would start no pool even when forced).
    before, small, forced = map(
        int, _run_python(code, timeout=120, NUMBA_NUM_THREADS="2").split()
    )
    assert small == before
    assert forced > before


def test_grid_search_in_worker_processes_after_a_fit():
    # numba's GNU OpenMP pool kills forked children; the kernels' serial
    # twins keep joblib's fork-based backend working after a fit
    code = """
        import warnings
        from joblib import parallel_backend
        from sklearn.model_selection import GridSearchCV
        from skprivfact.datasets import make_poisson_factorization
        from skprivfact.poisson_mf import PrivatePoissonMF
        warnings.simplefilter("ignore")
        X, X_noisy, _, _ = make_poisson_factorization(40, 12, 2, factor_shape=1.0,
                                                      epsilon=2.0, random_state=0)
        PrivatePoissonMF(2, epsilon=2.0, max_iter=10, random_state=0).fit(X_noisy)
        for solver in ("cavi", "mcmc"):
            for backend in ("loky", "multiprocessing", "threading"):
                model = PrivatePoissonMF(2, epsilon=2.0, solver=solver, max_iter=10,
                                         n_burn_in=10, n_kept_samples=5, random_state=0)
                with parallel_backend(backend):
                    search = GridSearchCV(model, {"n_components": [1, 2]}, cv=2, n_jobs=2)
                    search.fit(X_noisy)
                print(solver, backend, search.best_params_["n_components"])
    """
    out = _run_python(code, timeout=240)
    assert len(out.strip().splitlines()) == 6


def _exactly_low_rank_counts(scale):
    rng = np.random.default_rng(0)
    row_factors = rng.integers(0, 4, size=(100, 5))
    components = rng.integers(0, 4, size=(5, 40))
    return scale * (row_factors @ components).astype(float)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_exactly_low_rank_counts_are_reconstructed():
    # the posterior mean converges to the exact factorization when the counts
    # carry enough information (on counts of a few units it stays a posterior
    # mean, a few percent from the interpolating maximum-likelihood fit)
    X = _exactly_low_rank_counts(100)
    model = PrivatePoissonMF(5, max_iter=1000, tol=1e-8, random_state=0)
    rates = model.fit_transform(X) @ model.components_
    assert np.linalg.norm(X - rates) / np.linalg.norm(X) < 5e-3
    assert np.allclose(model.transform(X) @ model.components_, rates)
    assert np.allclose(model.inverse_transform(model.transform(X)), rates)
    nmf = NMF(5, beta_loss="kullback-leibler", solver="mu", max_iter=1000,
              init="nndsvda", random_state=0).fit(X)
    assert model.reconstruction_err_ < nmf.reconstruction_err_


def test_reconstruction_err_is_nmf_kullback_leibler_error():
    # MCMC's fit_transform returns the row factors the fit ended with
    X = _exactly_low_rank_counts(1)
    model = PrivatePoissonMF(5, solver="mcmc", n_burn_in=50, n_kept_samples=50,
                             random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # a short chain
        rates = model.fit_transform(X) @ model.components_
    expected = np.sqrt(2 * kl_div(X, rates).sum())
    assert model.reconstruction_err_ == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("sparse", [False, True])
def test_reconstruction_error_in_row_blocks(sparse):
    rng = np.random.default_rng(1)
    row_factors = rng.gamma(1.0, 1.0, size=(37, 3))
    components = rng.gamma(1.0, 1.0, size=(3, 11))
    noisy = rng.poisson(row_factors @ components) + rng.integers(-2, 3, size=(37, 11))
    counts = sp.csr_matrix(np.maximum(noisy, 0)) if sparse else noisy
    expected = np.sqrt(2 * kl_div(np.maximum(noisy, 0), row_factors @ components).sum())
    # blocks of 2 rows: the rows of the last block are fewer
    error = reconstruction_error(counts, row_factors, components, block_entries=25)
    assert error == pytest.approx(expected, rel=1e-12)


SOTU = get_data_home() / "sotu" / "sotu_counts_csr.npz"


def _sotu_cut(n_rows, n_words):
    """Dense SOTU counts of the ``n_words`` most frequent words and
    ``n_rows`` random non-empty paragraphs."""
    counts = sp.load_npz(SOTU).tocsr()
    top = np.sort(np.argsort(-np.asarray(counts.sum(axis=0)).ravel(), kind="stable")[:n_words])
    counts = counts[:, top]
    counts = counts[np.asarray(counts.sum(axis=1)).ravel() > 0]
    rows = np.sort(np.random.default_rng(0).choice(counts.shape[0], n_rows, replace=False))
    return counts[rows].toarray()


@pytest.mark.skipif(not SOTU.exists(), reason="SOTU counts absent")
def test_fitted_total_rate_matches_noisy_total_on_sparse_text():
    # on sparse text under heavy noise E[y | noisy] is about the rate for
    # most entries whatever the rate: only the noisy total pins it down, and
    # transform's count scale is fitted where the rows are inferred
    X = _sotu_cut(1000, 500)
    noisy = X + two_sided_geometric(1.0, 1, X.shape, random_state=0)
    model = PrivatePoissonMF(10, epsilon=1.0, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        rates = model.fit_transform(noisy) @ model.components_
    # the noisy total is the data's only hold on the total, and it is off
    # the clean one by the noise's own total (std ~ 9% of it here): the fit
    # stays within two of those stds, as the prior shapes chosen move it
    alpha = np.exp(-1.0)
    noise_total_std = np.sqrt(noisy.size * 2 * alpha / (1 - alpha) ** 2)
    assert abs(rates.sum() - noisy.sum()) < 2 * noise_total_std
    assert 0.85 < rates.sum() / X.sum() < 1.15
    # rows given to transform get the training rows' count scale: their
    # total is that of the same rows in the fit
    new_rows = model.transform(noisy[:200]) @ model.components_
    assert 0.97 < new_rows.sum() / rates[:200].sum() < 1.03
    # the sampler has no count scale: its total rests on the likelihood and
    # on the prior's scale, set from the noisy mean
    mcmc = PrivatePoissonMF(10, epsilon=1.0, solver="mcmc", n_burn_in=150, n_kept_samples=50,
                            random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        rates = mcmc.fit_transform(noisy) @ mcmc.components_
    assert 0.85 < rates.sum() / noisy.sum() < 1.15


@pytest.mark.skipif(not SOTU.exists(), reason="SOTU counts absent")
def test_sampler_components_stay_apart_on_sparse_text_under_heavy_noise():
    # From a random start under heavy noise the drawn prior shapes and the
    # components drift together towards dense, flat profiles (each sweep's
    # true counts are mostly the noise's): on SOTU at epsilon/N = 1 and K = 20
    # every pair of components ends above 0.95. From CAVI's fit (the default)
    # they stay apart. A cut of the corpus shows the same drift in seconds.
    noisy = _sotu_cut(600, 300) + two_sided_geometric(1.0, 1, (600, 300), random_state=1)
    flatness, similarity = {}, {}
    for start in ("cavi", "random"):
        model = PrivatePoissonMF(10, epsilon=1.0, solver="mcmc", chain_start=start,
                                 n_burn_in=300, n_kept_samples=100, random_state=0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.fit(noisy)
        unit = model.components_ / np.linalg.norm(model.components_, axis=1, keepdims=True)
        # cosine of each component with the flat profile
        flatness[start] = np.median(unit.sum(axis=1) / np.sqrt(unit.shape[1]))
        similarity[start] = model.max_component_similarity_
    # measured: CAVI's start 0.51 and 0.42, the random start 0.77 and 0.75
    assert flatness["cavi"] < 0.65 and similarity["cavi"] < 0.6
    assert flatness["random"] > flatness["cavi"] + 0.1


class _ColumnSpy:
    """A factorization whose transform records the columns it is shown (each
    column of X holds its own index) and whose rates are constant."""

    def __init__(self, n_features):
        self.components_ = np.ones((1, n_features))
        self.n_features_in_ = n_features
        self.shown = []

    def transform(self, X):
        self.shown.append(set(np.asarray(X)[0].astype(int)))
        return np.ones((X.shape[0], 1))


def test_heldout_entries_are_never_scored_by_factors_inferred_from_them():
    from skprivfact.poisson_mf import heldout_loglik

    n_features = 11
    X = np.tile(np.arange(n_features), (4, 1))
    spy = _ColumnSpy(n_features)
    clean = np.random.default_rng(0).poisson(1.0, size=X.shape)
    score = heldout_loglik(spy, X, clean, n_folds=3)
    # the copies shown each fold record into the same list
    assert len(spy.shown) == 3
    assert set().union(*spy.shown) == set(range(n_features))
    for observed in spy.shown:
        assert len(observed) < n_features  # the scored columns are not shown
    hidden = [set(range(n_features)) - observed for observed in spy.shown]
    assert sum(map(len, hidden)) == n_features and set().union(*hidden) == set(range(n_features))
    # constant unit rates: the score is the Poisson(1) log-likelihood of every entry once
    from scipy.stats import poisson

    assert score == pytest.approx(poisson.logpmf(clean, 1.0).mean())
    assert heldout_loglik(spy, X, clean, held_out="rows") == pytest.approx(score)
    with pytest.raises(ValueError, match="held_out must be 'entries' or 'rows'"):
        heldout_loglik(spy, X, clean, held_out="columns")
    with pytest.raises(ValueError, match=r"n_folds must be between 2 and the number of columns \(11\)"):
        heldout_loglik(spy, X, clean, n_folds=12)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_heldout_loglik_without_clean_counts_scores_the_noisy_entries():
    # X_clean=None: the noisy entries themselves, under the two-sided geometric
    # noise convolved with the Poisson law (brute-force sum over the true count)
    from scipy.stats import poisson
    from sklearn.decomposition import NMF

    from skprivfact.poisson_mf import heldout_loglik

    n_features, alpha = 11, np.exp(-1.0)
    noisy = np.random.default_rng(1).integers(-4, 6, size=(4, n_features))
    spy = _ColumnSpy(n_features)
    spy.alpha_ = alpha
    true_counts = np.arange(200)
    noise = (1 - alpha) / (1 + alpha) * alpha ** np.abs(noisy[..., None] - true_counts)
    expected = np.log((poisson.pmf(true_counts, 1.0) * noise).sum(axis=-1)).mean()
    assert heldout_loglik(spy, noisy, n_folds=3) == pytest.approx(expected, rel=1e-10)
    assert len(spy.shown) == 3  # entries scored at factors inferred without them
    spy.alpha_ = None  # fitted without noise: plain Poisson
    counts = np.abs(noisy)
    assert heldout_loglik(spy, counts) == pytest.approx(poisson.logpmf(counts, 1.0).mean())
    nmf = NMF(2, init="random", max_iter=5, random_state=0).fit(counts)
    with pytest.raises(ValueError, match="needs an estimator with a noise model"):
        heldout_loglik(nmf, counts)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_heldout_loglik_of_whole_noisy_rows_is_the_score():
    from skprivfact.poisson_mf import heldout_loglik

    X, X_noisy, _, _ = make_poisson_factorization(60, 30, 3, epsilon=1.0, random_state=0)
    model = PrivatePoissonMF(3, epsilon=1.0, random_state=0).fit(X_noisy)
    assert heldout_loglik(model, X_noisy, held_out="rows") == pytest.approx(
        model.score(X_noisy), rel=1e-12)
    # held-out entries score below the rows' own entries, which fitted them
    assert heldout_loglik(model, X_noisy) < model.score(X_noisy)
    # clean counts given as a sparse matrix score as the dense ones
    clean_fit = PrivatePoissonMF(3, random_state=0).fit(X)
    for held_out in ("rows", "entries"):
        assert heldout_loglik(clean_fit, X, sp.csr_matrix(X), held_out=held_out) == (
            heldout_loglik(clean_fit, X, X, held_out=held_out))
    raw = PrivatePoissonMF(3, epsilon=1.0, privatize=True, random_state=0).fit(X)
    with pytest.raises(ValueError, match="raw counts, which have no noise to score"):
        heldout_loglik(raw, X)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_grid_search_on_noisy_heldout_entries_follows_the_data_shape():
    # choosing the component prior on privatized data alone: the noisy
    # held-out entries as GridSearchCV's score pick a denser prior for counts
    # drawn with gamma shape 3 than for counts drawn with shape 0.1
    from sklearn.model_selection import GridSearchCV

    from skprivfact.poisson_mf import heldout_loglik

    chosen = {}
    for shape in (0.1, 3.0):
        _, X_noisy, _, _ = make_poisson_factorization(
            300, 60, 3, factor_shape=shape, factor_rate=shape, epsilon=2.0, random_state=0
        )
        search = GridSearchCV(
            PrivatePoissonMF(3, epsilon=2.0, factor_prior_shape=0.1, random_state=0),
            {"component_prior_shape": [0.05, 0.3, 1.0, 3.0]},
            scoring=lambda estimator, X, y=None: heldout_loglik(estimator, X),
            cv=3,
        ).fit(X_noisy)
        chosen[shape] = search.best_params_["component_prior_shape"]
    assert chosen[0.1] < chosen[3.0]


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_heldout_entries_do_not_reward_fitting_the_scored_counts():
    # without noise, a model that infers each row's factors from the scored
    # counts themselves looks better on whole rows than on unseen entries
    from skprivfact.poisson_mf import heldout_loglik

    X, _, _, _ = make_poisson_factorization(300, 60, 4, factor_shape=0.5, random_state=0)
    model = PrivatePoissonMF(4, random_state=0).fit(X[:250])
    rows = heldout_loglik(model, X[250:], X[250:], held_out="rows")
    entries = heldout_loglik(model, X[250:], X[250:])
    assert entries < rows


def test_auto_prior_rates_put_the_prior_mean_rate_at_the_mean_count():
    X, X_noisy, _, _ = make_poisson_factorization(60, 30, 3, factor_shape=0.5,
                                                  epsilon=1.0, random_state=0)
    for data, epsilon in [(X, None), (X_noisy, 1.0)]:
        model = PrivatePoissonMF(3, epsilon=epsilon, max_iter=5, random_state=0).fit(data)
        b, d = model.factor_prior_rate_, model.component_prior_rate_
        np.testing.assert_allclose(b, d)
        np.testing.assert_allclose(3 * 0.1 * 0.1 / (b * d), data.mean())
    # one rate given: the other one takes the rest of the scale
    model = PrivatePoissonMF(3, component_prior_rate=2.0, max_iter=5, random_state=0).fit(X)
    np.testing.assert_allclose(model.component_prior_rate_, 2.0)
    np.testing.assert_allclose(3 * 0.1 * 0.1 / (model.factor_prior_rate_ * 2.0), X.mean())
    # a noisy mean below its own standard error is raised to it
    alpha = np.exp(-1.0)
    negative = X_noisy - int(np.ceil(X_noisy.mean())) - 1
    model = PrivatePoissonMF(3, epsilon=1.0, max_iter=5, random_state=0).fit(negative)
    floor = np.sqrt(2 * alpha) / (1 - alpha) / np.sqrt(negative.size)
    np.testing.assert_allclose(3 * 0.01 / model.factor_prior_rate_**2, floor)


def test_auto_prior_shapes_follow_the_data_shape():
    # the default search on a validation split of the noisy rows picks a
    # denser component prior for counts drawn with gamma shape 3 than for
    # counts drawn with shape 0.1: the best scoring pair
    chosen = {}
    for shape in (0.1, 3.0):
        _, X_noisy, _, _ = make_poisson_factorization(
            300, 60, 3, factor_shape=shape, factor_rate=shape, epsilon=2.0, random_state=0
        )
        model = PrivatePoissonMF(3, epsilon=2.0, random_state=0).fit(X_noisy)
        search = model.prior_shape_search_
        np.testing.assert_array_equal(
            search["shapes"], [[0.1, 0.1], [0.1, 0.3], [0.1, 1.0], [0.3, 1.0]])
        picked = np.flatnonzero(
            (search["shapes"][:, 0] == model.factor_prior_shape_[0])
            & (search["shapes"][:, 1] == model.component_prior_shape_[0]))
        assert picked.size == 1
        # the best validation score (its fit to all the rows kept apart)
        assert picked[0] == np.nanargmax(search["validation_score"])
        chosen[shape] = model.component_prior_shape_[0]
    assert chosen[0.1] < chosen[3.0]


def test_auto_prior_shapes_search_the_one_release(monkeypatch):
    # with privatize=True the search fits and scores the release fit made:
    # one draw of noise, of the input's shape, for the whole fit
    from skprivfact.poisson_mf import _estimator

    draws = []

    def recording(epsilon, sensitivity, size, random_state=None):
        draws.append(size)
        return two_sided_geometric(epsilon, sensitivity, size, random_state=random_state)

    monkeypatch.setattr(_estimator, "two_sided_geometric", recording)
    X, _, _, _ = make_poisson_factorization(250, 40, 3, factor_shape=1.0, random_state=0)
    model = PrivatePoissonMF(3, epsilon=1.0, privatize=True, random_state=0).fit(X)
    assert model.prior_shape_search_ is not None
    assert draws == [X.shape]


def test_auto_prior_shapes_pass_over_coinciding_components(monkeypatch, capsys):
    from skprivfact.poisson_mf import _estimator

    _, X_noisy, _, _ = make_poisson_factorization(
        250, 40, 3, factor_shape=1.0, epsilon=1.0, random_state=0
    )
    # every fit flagged: each pair is fitted to all the rows (the sparsest
    # first, from 1 + _SHAPE_RESTARTS random starts), the least similar of
    # them kept, with one warning, its own
    n_starts = 1 + _estimator._SHAPE_RESTARTS
    assert n_starts > 1
    monkeypatch.setattr(_estimator, "SIMILARITY_WARNING", -1.0)
    with pytest.warns(UserWarning, match="cosine similarity") as record:
        model = PrivatePoissonMF(3, epsilon=1.0, random_state=0, verbose=1).fit(X_noisy)
    assert sum("cosine similarity" in str(w.message) for w in record) == 1
    search = model.prior_shape_search_
    assert np.isnan(search["validation_score"]).all()
    passed_over = [line for line in capsys.readouterr().out.splitlines()
                   if line.endswith("passed over")]
    tried = [search["shapes"][0]] * n_starts + list(search["shapes"][1:])
    assert [line.split(")")[0] + ")" for line in passed_over] == [
        f"prior shapes ({a:g}, {c:g})" for a, c in tried]
    similarities = [float(line.split("similarity ")[1].split(",")[0]) for line in passed_over]
    assert model.max_component_similarity_ == pytest.approx(min(similarities), abs=1e-4)
    least = tried[int(np.argmin(similarities))]
    assert (model.factor_prior_shape_[0], model.component_prior_shape_[0]) == tuple(least)
    monkeypatch.undo()

    # the best pair's fit to all the rows flagged: the same pair from a new
    # random start, and after n_starts starts the next pair, is fitted and kept;
    # the passed-over fits leave no warning
    fit_solver = _estimator.PrivatePoissonMF._fit_solver
    fitted = []
    for n_flagged in (1, n_starts):
        fitted.clear()

        def flag_first_full_fits(self, X, shapes, rng, dtype, n_flagged=n_flagged):
            start = rng.get_state()[1].copy()
            row_factors = fit_solver(self, X, shapes, rng, dtype)
            if X.shape[0] == X_noisy.shape[0]:
                fitted.append((shapes, start))
                if len(fitted) <= n_flagged:
                    self.max_component_similarity_ = 0.99
            return row_factors

        monkeypatch.setattr(_estimator.PrivatePoissonMF, "_fit_solver", flag_first_full_fits)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            model = PrivatePoissonMF(3, epsilon=1.0, random_state=0).fit(X_noisy)
        assert len(fitted) == n_flagged + 1
        assert all(shapes == fitted[0][0] for shapes, _ in fitted[:n_starts])
        # each start of the pair from its own random state
        assert not np.array_equal(fitted[0][1], fitted[1][1])
        if n_flagged == n_starts:
            assert fitted[n_starts][0] != fitted[0][0]
        assert (model.factor_prior_shape_[0], model.component_prior_shape_[0]) == fitted[-1][0]
        assert model.max_component_similarity_ < 0.95

    # every fit to all the rows flagged: the least similar one is fitted
    # again from its random state and kept, with its warning alone
    fitted.clear()

    def flag_every_full_fit(self, X, shapes, rng, dtype):
        row_factors = fit_solver(self, X, shapes, rng, dtype)
        if X.shape[0] == X_noisy.shape[0]:
            fitted.append((shapes, self.components_.copy()))
            # the first pair's components the least similar
            self.max_component_similarity_ = 0.97 if shapes == fitted[0][0] else 0.99
        return row_factors

    monkeypatch.setattr(_estimator.PrivatePoissonMF, "_fit_solver", flag_every_full_fit)
    with pytest.warns(UserWarning, match="cosine similarity 0.9700") as record:
        model = PrivatePoissonMF(3, epsilon=1.0, random_state=0).fit(X_noisy)
    assert sum("cosine similarity" in str(w.message) for w in record) == 1
    n_candidates = len(fitted) - 1
    assert n_candidates >= 2
    assert fitted[-1][0] == fitted[0][0]
    np.testing.assert_array_equal(fitted[-1][1], fitted[0][1])
    np.testing.assert_array_equal(model.components_, fitted[0][1])


def test_auto_prior_shapes_grids_and_where_no_search_runs():
    _, X_noisy, _, _ = make_poisson_factorization(
        250, 40, 3, factor_shape=1.0, epsilon=1.0, random_state=0
    )
    kwargs = {"epsilon": 1.0, "max_iter": 20, "random_state": 0}
    # one shape given: the other is searched alone
    model = PrivatePoissonMF(3, factor_prior_shape=0.5, **kwargs).fit(X_noisy)
    np.testing.assert_array_equal(model.prior_shape_search_["shapes"],
                                  [[0.5, 0.1], [0.5, 0.3], [0.5, 1.0]])
    assert model.factor_prior_shape_[0] == 0.5
    model = PrivatePoissonMF(3, component_prior_shape=2.0, **kwargs).fit(X_noisy)
    np.testing.assert_array_equal(model.prior_shape_search_["shapes"],
                                  [[0.1, 2.0], [0.3, 2.0]])
    assert model.component_prior_shape_[0] == 2.0
    # no search: fewer than 200 rows, the sampler (its shapes are drawn,
    # starting at 0.1), empirical Bayes, shapes given
    for model, data in [
        (PrivatePoissonMF(3, **kwargs), X_noisy[:199]),
        (PrivatePoissonMF(3, solver="mcmc", n_burn_in=5, n_kept_samples=5, **kwargs),
         X_noisy),
        (PrivatePoissonMF(3, empirical_bayes=True, **kwargs), X_noisy),
    ]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.fit(data)
        assert model.prior_shape_search_ is None
    # where no search runs, "auto" is 0.1: the same fit as the shapes given
    # (the sampler's CAVI start searches its own: from a random start)
    shapes = {"factor_prior_shape": 0.1, "component_prior_shape": 0.1}
    sampler = {"solver": "mcmc", "n_burn_in": 5, "n_kept_samples": 5}
    for extra, data in [({}, X_noisy[:199]),
                        ({**sampler, "chain_start": "random"}, X_noisy)]:
        fixed = PrivatePoissonMF(3, **shapes, **extra, **kwargs).fit(data)
        auto = PrivatePoissonMF(3, **extra, **kwargs).fit(data)
        np.testing.assert_array_equal(fixed.components_, auto.components_)
    # from CAVI's start, "auto" searches the start's shapes: another start
    fixed = PrivatePoissonMF(3, **shapes, **sampler, **kwargs).fit(X_noisy)
    auto = PrivatePoissonMF(3, **sampler, **kwargs).fit(X_noisy)
    assert not np.array_equal(fixed.components_, auto.components_)
    with pytest.raises(ValueError, match="factor_prior_shape"):
        PrivatePoissonMF(3, factor_prior_shape="dense").fit(X_noisy)


def test_a_fit_whose_components_share_their_largest_columns_is_passed_over(
    monkeypatch, capsys
):
    # Two components with the same 8 largest columns coincide even below the
    # cosine threshold ("distinct top words"): the fit to all the rows is
    # passed over and the same pair fitted from a new start, which is kept.
    from skprivfact.poisson_mf import _estimator

    _, X_noisy, _, _ = make_poisson_factorization(
        250, 40, 3, factor_shape=1.0, epsilon=1.0, random_state=0
    )
    same_top_columns = _estimator.same_top_columns
    calls = []

    def first_fit_shares(components):
        calls.append(components.copy())
        shared = same_top_columns(components)
        if len(calls) == 1:
            shared[0, 1] = shared[1, 0] = True
        return shared

    monkeypatch.setattr(_estimator, "same_top_columns", first_fit_shares)
    model = PrivatePoissonMF(3, epsilon=1.0, random_state=0, verbose=1).fit(X_noisy)
    passed_over = [line for line in capsys.readouterr().out.splitlines()
                   if line.endswith("passed over")]
    assert len(calls) == 2 and len(passed_over) == 1
    assert "two components with the same 8 largest columns" in passed_over[0]
    assert model.max_component_similarity_ < 0.95
    assert not np.array_equal(calls[0], calls[1])
    np.testing.assert_array_equal(model.components_, calls[1])
    # The real test: no two of the kept components share their largest columns.
    shared = same_top_columns(model.components_)
    np.fill_diagonal(shared, False)
    assert not shared.any()


@pytest.mark.parametrize(
    "changed", [{"epsilon": None, "privatize": False}, {"privatize": False}, {"epsilon": 2.0}]
)
def test_noise_parameters_changed_after_fit_are_refused(changed):
    # transform would read the counts as clean or noisy against the model.
    X = np.random.RandomState(0).poisson(2, size=(50, 6))
    model = PrivatePoissonMF(2, epsilon=1.0, privatize=True, max_iter=3, random_state=0).fit(X)
    model.set_params(**changed)
    for method in (model.transform, model.score, model.partial_fit):
        with pytest.raises(ValueError, match="changed since fit: call fit again"):
            method(X)


def test_a_refused_refit_keeps_the_fitted_noise_parameters():
    X = np.random.RandomState(0).poisson(2, size=(50, 6))
    model = PrivatePoissonMF(2, epsilon=1.0, privatize=True, max_iter=3, random_state=0).fit(X)
    model.set_params(epsilon=3.0)
    with pytest.raises(ValueError):
        model.fit(-X)  # refused input
    with pytest.raises(ValueError, match="changed since fit: call fit again"):
        model.transform(X)


def test_a_bool_epsilon_is_refused_as_by_every_estimator():
    X = np.ones((5, 4))
    with pytest.raises(ValueError, match="epsilon must be a positive number; got True"):
        PrivatePoissonMF(2, epsilon=True).fit(X)
