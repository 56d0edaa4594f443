"""PrivatePoissonMF at scale: compact noisy counts, row-block sweeps, Dask."""

import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp

from skprivfact.datasets import make_poisson_factorization
from skprivfact.poisson_mf import PrivatePoissonMF, _blocks
from skprivfact.poisson_mf._blocks import compact_counts

EPSILON = 1.0


@pytest.fixture(scope="module")
def noisy():
    _, X_noisy, _, _ = make_poisson_factorization(
        300, 60, 4, factor_shape=0.5, epsilon=EPSILON, random_state=0
    )
    return X_noisy


def test_compact_counts_picks_the_smallest_exact_dtype():
    base = np.array([[0, -3, 5], [2, 1, -1]])
    assert compact_counts(base).dtype == np.int16
    assert compact_counts(base.astype(np.float64)).dtype == np.int16
    wide = base.copy()
    wide[0, 0] = -(2**15) - 1
    assert compact_counts(wide).dtype == np.int32
    huge = base.astype(np.float64)
    huge[1, 2] = 2.0**40
    assert compact_counts(huge).dtype == np.float64
    for X in (base, wide, huge, sp.csr_matrix(base), sp.csr_matrix(wide)):
        dense = X.toarray() if sp.issparse(X) else X
        np.testing.assert_array_equal(compact_counts(X), dense)
    # kept as given when already compact
    compact = base.astype(np.int16)
    assert compact_counts(compact) is compact


def test_int16_input_gives_the_float64_fit(noisy):
    kwargs = {"epsilon": EPSILON, "max_iter": 15, "tol": 0, "random_state": 0}
    reference = PrivatePoissonMF(4, **kwargs).fit_transform(noisy.astype(np.float64))
    for dtype in (np.int16, np.int32, np.int64):
        np.testing.assert_array_equal(
            PrivatePoissonMF(4, **kwargs).fit_transform(noisy.astype(dtype)), reference
        )


def test_a_memmap_of_noisy_counts_skips_the_prior_shape_search(noisy, tmp_path):
    # validation hands the fit a plain ndarray view of the map: the search,
    # which gathers 80% of the rows, must still see that it reads a file
    path = tmp_path / "noisy.dat"
    stored = np.memmap(path, dtype=np.int16, mode="w+", shape=noisy.shape)
    stored[:] = noisy
    stored.flush()
    mapped = np.memmap(path, dtype=np.int16, mode="r", shape=noisy.shape)
    kwargs = {"epsilon": EPSILON, "max_iter": 15, "tol": 0, "random_state": 0}
    model = PrivatePoissonMF(4, **kwargs).fit(mapped)
    assert model.prior_shape_search_ is None
    reference = PrivatePoissonMF(
        4, factor_prior_shape=0.1, component_prior_shape=0.1, **kwargs
    ).fit(noisy)
    np.testing.assert_array_equal(model.components_, reference.components_)
    # the same counts in memory are searched
    assert PrivatePoissonMF(4, **kwargs).fit(noisy).prior_shape_search_ is not None


@pytest.mark.parametrize("noise_update", ["marginal", "bessel-mean"])
def test_row_blocks_give_the_one_block_fit(noisy, monkeypatch, noise_update):
    kwargs = {
        "epsilon": EPSILON,
        "max_iter": 15,
        "tol": 0,
        "random_state": 0,
        "noise_update": noise_update,
    }
    whole = PrivatePoissonMF(4, **kwargs)
    whole_factors = whole.fit_transform(noisy)
    # 7 rows per block: 43 blocks, the last one shorter
    monkeypatch.setattr(_blocks, "BLOCK_ENTRIES", 7 * noisy.shape[1])
    blocked = PrivatePoissonMF(4, **kwargs)
    blocked_factors = blocked.fit_transform(noisy)
    # the sums over rows come in another order: equal to rounding
    np.testing.assert_allclose(
        blocked.components_, whole.components_, rtol=1e-5, atol=1e-8
    )
    np.testing.assert_allclose(blocked_factors, whole_factors, rtol=1e-5, atol=1e-8)
    assert blocked.score(noisy) == pytest.approx(whole.score(noisy), rel=1e-7)


def test_fit_allocates_no_dense_copy_of_the_matrix(monkeypatch):
    # 1000 x 1000 int16: the compact input is 2 MB; any dense copy, even an
    # int16 one, would add 2 MB or more
    _, X_noisy, _, _ = make_poisson_factorization(
        1000, 1000, 3, factor_shape=0.5, epsilon=EPSILON, random_state=1
    )
    X_noisy = X_noisy.astype(np.int16)
    monkeypatch.setattr(_blocks, "BLOCK_ENTRIES", 2**14)
    model = PrivatePoissonMF(3, epsilon=EPSILON, max_iter=3, tol=0, random_state=0)
    model.fit(X_noisy[:300])  # compile outside the measured fits (search included)
    peaks = {}
    for shapes in ("auto", 0.1):
        model.set_params(factor_prior_shape=shapes, component_prior_shape=shapes)
        tracemalloc.start()
        try:
            model.fit(X_noisy)
            peaks[shapes] = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert (model.prior_shape_search_ is not None) == (shapes == "auto")
    # what remains is the factors' state, O((rows + columns) x K), and one
    # block's buffers: 0.8 bytes an entry here (measured)
    assert peaks[0.1] < 1.0 * X_noisy.size
    # the search of "auto" shapes fits 80% of the rows gathered block by
    # block and keeps the other 20% to score: 1.9 bytes an entry (measured);
    # a copy of the rows would add 2
    assert peaks["auto"] < 2.1 * X_noisy.size


def test_dask_fit_equals_in_memory_fit(noisy, monkeypatch):
    pytest.importorskip("distributed")
    da = pytest.importorskip("dask.array")
    from distributed import Client, LocalCluster

    # a Dask array skips the search of "auto" prior shapes (they start at
    # 0.1): the in-memory reference is given those shapes
    kwargs = {"epsilon": EPSILON, "max_iter": 15, "tol": 0, "random_state": 0,
              "factor_prior_shape": 0.1, "component_prior_shape": 0.1}
    # in-memory blocks of 100 rows, the Dask chunks below
    monkeypatch.setattr(_blocks, "BLOCK_ENTRIES", 100 * noisy.shape[1])
    reference = PrivatePoissonMF(4, **kwargs)
    reference_factors = reference.fit_transform(noisy)
    with pytest.raises(ValueError, match="needs a dask.distributed Client"):
        PrivatePoissonMF(4, **kwargs).fit(da.from_array(noisy, chunks=(100, 60)))
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        Client(cluster),
    ):
        model = PrivatePoissonMF(4, **kwargs)
        factors = model.fit_transform(da.from_array(noisy, chunks=(100, 60)))
        auto = PrivatePoissonMF(4, epsilon=EPSILON, max_iter=15, tol=0, random_state=0)
        auto.fit(da.from_array(noisy, chunks=(100, 60)))
        assert auto.prior_shape_search_ is None
        np.testing.assert_array_equal(auto.components_, reference.components_)
        # same blocks, same order of the sums: bit for bit
        np.testing.assert_array_equal(model.components_, reference.components_)
        np.testing.assert_array_equal(factors, reference_factors)
        assert model.count_scale_ == reference.count_scale_
        # other chunks (rows and columns): the same fit to rounding
        other = PrivatePoissonMF(4, **kwargs).fit(
            da.from_array(noisy, chunks=(130, 25))
        )
        np.testing.assert_allclose(
            other.components_, reference.components_, rtol=1e-4, atol=1e-6
        )
        # new rows in chunks of 15 against one block of 40: the products'
        # rounding depends on the number of rows in them
        held_out = da.from_array(noisy[:40], chunks=(15, 60))
        np.testing.assert_allclose(
            model.transform(held_out), reference.transform(noisy[:40]), rtol=1e-12
        )
        assert model.score(held_out) == pytest.approx(
            reference.score(noisy[:40]), rel=1e-12
        )
        with pytest.raises(ValueError, match="A Dask array is fitted by private CAVI"):
            PrivatePoissonMF(4, epsilon=EPSILON, solver="mcmc").fit(
                da.from_array(noisy, chunks=(100, 60))
            )
        with pytest.raises(ValueError, match="non-integer value"):
            PrivatePoissonMF(4, epsilon=EPSILON).fit(
                da.from_array(noisy + 0.5, chunks=(100, 60))
            )


def test_partial_fit_improves_block_by_block_and_ends_near_the_batch_fit():
    from skprivfact.poisson_mf import heldout_loglik

    X, X_noisy, _, _ = make_poisson_factorization(
        3300, 100, 4, factor_shape=0.5, epsilon=EPSILON, random_state=0
    )
    train, test = slice(0, 3000), slice(3000, None)
    # the online algorithm against the batch one at the same priors ("auto"
    # shapes would be searched on the first block alone)
    kwargs = {"epsilon": EPSILON, "factor_prior_shape": 0.1, "component_prior_shape": 0.1,
              "random_state": 0}
    batch = PrivatePoissonMF(4, **kwargs).fit(X_noisy[train])
    batch_score = heldout_loglik(batch, X_noisy[test], X[test])
    online = PrivatePoissonMF(4, **kwargs)
    scores = []
    for start in range(0, 3000, 300):
        online.partial_fit(X_noisy[start : start + 300])
        scores.append(heldout_loglik(online, X_noisy[test], X[test]))
    assert online.n_steps_ == 10
    # every block helps (measured: -1.0314 after the first, -1.0234 after
    # the tenth, batch -1.0126)
    assert np.all(np.diff(scores) > 0)
    assert scores[-1] - scores[0] > 0.004
    assert abs(scores[-1] - batch_score) < 0.015 * abs(batch_score)
    # the first call is a fit of its block
    first = PrivatePoissonMF(4, epsilon=EPSILON, random_state=0).partial_fit(
        X_noisy[:300]
    )
    alone = PrivatePoissonMF(4, epsilon=EPSILON, random_state=0).fit(X_noisy[:300])
    np.testing.assert_array_equal(first.components_, alone.components_)
    # hidden from the solvers without it, as scikit-learn's MLP hides it
    for params in ({"solver": "mcmc"}, {"noise_update": "bessel-mean"}):
        model = PrivatePoissonMF(4, epsilon=EPSILON, **params)
        assert not hasattr(model, "partial_fit")
        with pytest.raises(AttributeError, match="partial_fit") as error:
            model.partial_fit(X_noisy[:300])
        # the reason, as the cause (or the message, by scikit-learn's version)
        reasons = str(error.value) + str(error.value.__cause__)
        assert "partial_fit needs solver='cavi'" in reasons
    assert hasattr(PrivatePoissonMF(4, epsilon=None, noise_update="bessel-mean"),
                   "partial_fit")


def test_partial_fit_without_noise_accumulates_sparse_blocks():
    X, _, _, _ = make_poisson_factorization(
        1200, 80, 3, factor_shape=0.5, epsilon=None, random_state=2
    )
    online = PrivatePoissonMF(3, random_state=0)
    for start in range(0, 1200, 400):
        online.partial_fit(sp.csr_matrix(X[start : start + 400]))
    batch = PrivatePoissonMF(3, random_state=0).fit(X)
    # the same data explained about as well as by the batch fit
    assert online.score(X) > batch.score(X) - 0.02 * abs(batch.score(X))
    assert online.n_steps_ == 3


def test_partial_fit_after_a_sampler_refit_starts_afresh():
    _, X_noisy, _, _ = make_poisson_factorization(
        200, 30, 2, factor_shape=0.5, epsilon=EPSILON, random_state=1
    )
    model = PrivatePoissonMF(2, epsilon=EPSILON, max_iter=20, random_state=0)
    model.partial_fit(X_noisy[:100]).partial_fit(X_noisy[100:])
    assert model.n_steps_ == 2
    model.set_params(solver="mcmc", n_burn_in=5, n_kept_samples=5).fit(X_noisy)
    assert not hasattr(model, "n_steps_")
    # back to CAVI: the first partial_fit is a fit of its block, not an update
    # of the first CAVI fit's statistics with the sampler's components
    model.set_params(solver="cavi").partial_fit(X_noisy[:100])
    assert model.n_steps_ == 1
    alone = PrivatePoissonMF(2, epsilon=EPSILON, max_iter=20, random_state=0)
    np.testing.assert_array_equal(model.components_,
                                  alone.partial_fit(X_noisy[:100]).components_)
