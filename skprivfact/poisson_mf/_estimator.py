"""PrivatePoissonMF: Bayesian Poisson factorization of locally privatized counts."""

import contextlib
import math
import mmap
import re
import sys
import warnings
from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
from sklearn.base import (
    ClassNamePrefixFeaturesOutMixin,
    TransformerMixin,
    _fit_context,
    clone,
)
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.metaestimators import available_if
from sklearn.utils.validation import check_is_fitted

from ..base import LocalPrivacyEstimator
from ..mechanisms import two_sided_geometric
from ..utils._progress import Progress, SolverLineRelay
from ..utils._validation import (
    check_count_matrix,
    check_no_fit_params,
    check_noisy_count_matrix,
    check_privacy_params,
)
from . import _blocks
from ._blocks import InMemoryRowBlocks, RowSubsetBlocks, compact_counts
from ._cavi import (
    block_row_sums,
    block_sum,
    column_statistics,
    fit_cavi,
    log_likelihood_sum,
)
from ._dask import DaskRowBlocks, is_dask_array
from ._evaluation import (
    _N_TOP_COLUMNS,
    SIMILARITY_WARNING,
    _unit_rows,
    heldout_loglik,
    reconstruction_error,
    same_top_columns,
)
from ._noisy_count import noise_std

__all__ = ["PrivatePoissonMF"]

# A fit whose split R-hat exceeds this warns (ArviZ's threshold).
RHAT_WARNING_THRESHOLD = 1.01
# A noisy fit warns when its total rate and the released total differ by more
# than this many standard deviations of the noise in the released total (the
# release's own spread) and by more than this share of the released total
# (under light noise the standard deviation is a tiny share, and a gap below
# a few percent matters little).
TOTAL_WARNING_STDS = 3.0
TOTAL_WARNING_SHARE = 0.05
# The solvers print their progress; these lines become Progress updates.
_CAVI_LINE = re.compile(
    r"iteration (?P<iteration>\d+): log-likelihood per entry (?P<objective>\S+?),")
_MCMC_LINE = re.compile(
    r"chain (?P<phase>\d+): sweep (?P<iteration>\d+)/\d+ .*per entry (?P<objective>\S+?),")
_SAMPLE_WEIGHT_REASON = (
    "each row is one record's (privatized) counts, modelled as such; a weight "
    "would change the likelihood, not the data. Repeat or drop rows instead."
)


# Noisy input accepted as it is; other dtypes are converted to float64 first.
_NOISY_INPUT_DTYPES = (np.float64, np.float32, np.int64, np.int32, np.int16, np.int8)


def _output_dtype(X):
    """float32 for float32 input (as NMF does), float64 otherwise."""
    return np.float32 if getattr(X, "dtype", None) == np.float32 else np.float64

# Smallest epsilon / sensitivity accepted: below it the noise swamps any count
# (standard deviation sqrt(2 alpha) / (1 - alpha) > 1.4e6) and 1 - alpha
# carries fewer than 10 significant digits.
MIN_EPSILON_PER_UNIT = 1e-6
# Largest: beyond it alpha = exp(-epsilon / sensitivity) leaves the normal
# floats (below 1e-304, then 0), where the noise model's logarithms and
# ratios break; a count is then noisy with probability below 1e-304.
MAX_EPSILON_PER_UNIT = 700.0

# Floor of the mean count that sets the "auto" prior rates (all-zero input).
_MIN_MEAN_COUNT = 1e-6

# "auto" prior shapes: the (factor, component) pairs CAVI chooses from, the
# sparsest first (the fallback), and the values of one shape searched when the
# other is given. Sparse components keep sparse counts under heavy noise from
# collapsing; denser ones predict dense counts better, and a validation split
# of the rows tells which the data are.
_SHAPE_PAIRS = ((0.1, 0.1), (0.1, 0.3), (0.1, 1.0), (0.3, 1.0))
_FACTOR_SHAPES = (0.1, 0.3)
_COMPONENT_SHAPES = (0.1, 0.3, 1.0)
# The search holds out this share of the rows, and needs this many rows. A
# fifth (not a tenth) keeps the noise of the validation score below the small
# gaps between the pairs under light noise.
_SHAPE_VALIDATION_SHARE = 0.2
_SHAPE_SEARCH_MIN_ROWS = 200
# CAVI fits to all the rows with the first pair from this many more random
# starts, when its components coincide, before the next pair.
_SHAPE_RESTARTS = 4
# Gibbs sweeps of transform after a sampler's fit (at most n_burn_in and
# n_kept_samples): a row moves between components slowly from CAVI's
# factors, and on single cells (K=20) 200 kept sweeps scored held-out counts
# 0.001 per entry worse than 500.
_ROW_SAMPLER_BURN_IN = 100
_ROW_SAMPLER_KEPT = 500


def _row_blocks(X):
    """X as a source of row blocks (an array is wrapped; a source is kept)."""
    return InMemoryRowBlocks(X) if isinstance(X, np.ndarray) else X


def _noisy_total(X):
    """The sum of the prepared noisy counts ``X`` (an array or a block source)."""
    return float(sum(_row_blocks(X).map(block_sum, (), False)))


def _reconstruction_error(X, row_factors, components):
    """``reconstruction_error`` of an array, or summed over a source's blocks."""
    if not isinstance(X, DaskRowBlocks):
        return reconstruction_error(X, row_factors, components,
                                    block_entries=_blocks.BLOCK_ENTRIES)
    divergence = sum(
        0.5 * error**2 for error in X.map(_block_reconstruction_error, (row_factors,),
                                          np.asarray(components, dtype=np.float64))
    )
    return float(np.sqrt(2.0 * divergence))


def _block_reconstruction_error(block, row_factors, components, workspace=None):
    return reconstruction_error(block, row_factors, components,
                                block_entries=_blocks.BLOCK_ENTRIES)


def max_cosine_similarity(components):
    """Largest cosine similarity between two rows of ``components`` (0 for one row)."""
    if components.shape[0] < 2:
        return 0.0
    return most_similar_components(components)[0]


def most_similar_components(components, n_top=_N_TOP_COLUMNS):
    """The most similar pair of rows of ``components`` (at least two rows):
    ``(cosine similarity, i, j, shared)`` with ``i < j`` and ``shared`` the
    number of columns among the ``n_top`` largest of both rows."""
    unit = _unit_rows(components)
    similarity = unit @ unit.T
    np.fill_diagonal(similarity, -np.inf)
    i, j = sorted(np.unravel_index(np.argmax(similarity), similarity.shape))
    n_top = min(n_top, components.shape[1])
    tops = np.argsort(-components[[i, j]], axis=1, kind="stable")[:, :n_top]
    shared = np.intersect1d(tops[0], tops[1]).size
    return float(similarity[i, j]), int(i), int(j), int(shared)


def _backed_by_file(X):
    """Whether ``X`` is a memory map or a view of one (validation turns a
    ``numpy.memmap`` into a plain ndarray that still reads the file)."""
    while isinstance(X, np.ndarray):
        if isinstance(X, np.memmap):
            return True
        X = X.base
    return isinstance(X, mmap.mmap)


class PrivatePoissonMF(
    ClassNamePrefixFeaturesOutMixin, TransformerMixin, LocalPrivacyEstimator
):
    """Bayesian Poisson factorization of counts privatized with geometric noise.

    Privacy: the estimator is post-processing of data released under the
    geometric mechanism (:class:`~skprivfact.GeometricPrivatizer`): every
    count y was released as y + tau, tau ~ 2Geo(alpha), alpha =
    exp(-epsilon / sensitivity), which is (sensitivity, epsilon)-limited-
    precision local privacy for each row (rows within L1 distance
    ``sensitivity`` are e**epsilon-indistinguishable). Fitting spends no
    budget; ``epsilon`` and ``sensitivity`` only tell the model what noise to
    expect, and must be those the data were privatized with. With
    ``privatize=True`` the estimator releases its raw input itself, with fresh
    noise in every call of :meth:`fit`, :meth:`transform` and :meth:`score`:
    each call is then one release of its input at ``epsilon``, and calls on
    the same rows compose. With ``epsilon=None`` the model is ordinary,
    non-private Bayesian Poisson factorization. Nothing per training row is
    kept in the fitted estimator: :meth:`fit_transform` returns the rows'
    factors, :meth:`fit` forgets them.

    The model is theta_dk ~ Gamma(a, b), phi_kv ~ Gamma(c, d), y_dv ~
    Poisson(sum_k theta_dk phi_kv), and with ``epsilon`` set the observed
    noisy count is y_dv + tau_dv, the true count being latent (Schein et al.
    2019). ``solver="cavi"`` is coordinate-ascent variational inference: by
    default (``noise_update="marginal"``) with the noise integrated out of
    each entry exactly, or with the Bessel updates of Schofield et al.;
    ``solver="mcmc"`` is the Gibbs sampler of Schein et al.

    Read more in :ref:`Privacy guarantees <privacy-local>`.

    Parameters
    ----------
    n_components : int, default=10
        Number of factors K.
    epsilon : float, default=None
        Privacy parameter the input was privatized with; None for clean counts.
        ``epsilon / sensitivity`` must lie in [1e-6, 700] (at 1e-6 the noise's
        standard deviation is 1.4e6 per count already; above 700 a count is
        noisy with probability below 1e-304: fit it with ``epsilon=None``);
        other values raise a ValueError.
    sensitivity : int, default=1
        The L1 distance N of limited-precision local privacy the input was
        privatized with.
    solver : {"cavi", "mcmc"}, default="cavi"
        Variational inference (fast, point estimate of the posterior) or the
        Gibbs sampler (slower, more accurate under heavy noise).
    privatize : bool, default=False
        Whether the input of :meth:`fit`, :meth:`transform` and :meth:`score`
        is raw counts that the estimator privatizes itself at
        ``(sensitivity, epsilon)`` before modelling them. This is the route
        for tracing a privacy-utility curve with ``GridSearchCV`` over
        ``epsilon`` on raw counts; :meth:`score` then returns the
        log-likelihood of the clean held-out counts. Requires ``epsilon``.
    factor_prior_shape : float or "auto", default="auto"
        Shape a of the gamma prior of the row factors theta. With "auto" (for
        either shape) CAVI chooses the shapes on a validation split of the
        input's rows: 20% of them, drawn with ``random_state``, are held out,
        the model is fitted to the rest with each candidate (factor,
        component) pair, (0.1, 0.1), (0.1, 0.3), (0.1, 1) and (0.3, 1) when
        both are "auto" (a in 0.1, 0.3 or c in 0.1, 0.3, 1 when the other is
        given), and each fit is scored by :func:`~skprivfact.poisson_mf.heldout_loglik` of the
        held-out rows' own entries (under the noise model when private: the
        search reads nothing but the input). Fits whose components coincide
        (largest similarity above 0.95) are passed over, and the pair with the
        best score is fitted to all the rows; when that fit's components
        coincide (or two have the same 8 largest columns), the same pair from up to four more random starts, then the
        next best pair, then those passed over (the sparsest first), and when
        all coincide, the least similar fit is kept. Small shapes (sparse
        components) keep sparse counts under heavy noise from collapsing,
        larger ones predict dense counts better. The search costs one fit per
        candidate; it is skipped, and "auto" means 0.1, with fewer than 200
        rows, for the sampler (whose shapes start at 0.1 and are drawn with
        ``sample_prior_shapes``; the CAVI fit it starts from with
        ``chain_start="cavi"`` runs the search), with ``empirical_bayes``, and
        for Dask input and for memory-mapped noisy counts
        (``privatize=False``). ``prior_shape_search_`` reports it (None for
        the sampler).
    factor_prior_rate : float or "auto", default="auto"
        Rate b of the gamma prior of the row factors theta. "auto" sets the
        prior's scale from the data: the prior mean of every rate,
        ``K (a / b) (c / d)``, is then the mean count of ``X`` (for noisy
        counts the noisy mean, unbiased for the clean one, and at least its
        standard error), with ``b = d`` when both are "auto". Under heavy
        noise the likelihood barely constrains the total rate, and a prior on
        another scale pulls the fitted total towards its own.
    component_prior_shape : float or "auto", default="auto"
        Shape c of the gamma prior of the components phi; "auto" as for
        ``factor_prior_shape``.
    component_prior_rate : float or "auto", default="auto"
        Rate d of the gamma prior of the components phi; "auto" as for
        ``factor_prior_rate``.
    empirical_bayes : bool, default=False
        Whether to fit the prior shape and rate per component by empirical
        Bayes (Wang's EBPMF), alternating with the sweeps; the four prior
        parameters above are then only starting values. CAVI only.
    sample_prior_shapes : bool, default=True
        MCMC only: give the prior shapes (``factor_prior_shape`` and
        ``component_prior_shape``, then only starting values) a log-uniform
        hyperprior on [0.02, 5] and draw them every sweep, the prior means
        held fixed: one factor shape per component (a pattern most rows share
        and one few rows use differ in sparsity) and one shape shared by the
        components. The fitted ``factor_prior_shape_`` and
        ``component_prior_shape_`` are their posterior means. Under heavy noise
        the likelihood barely pins small rates, and a fixed sparse shape pulls
        the sampled true counts, and so the total rate, towards zero; drawn,
        the shapes follow the data. False keeps them fixed.
    max_iter : int, default=200
        Maximum number of CAVI sweeps (also used by :meth:`transform`).
    tol : float, default=1e-4
        CAVI stops when the relative change of the log-likelihood per entry at
        the posterior means, checked every ``evaluate_every`` sweeps, is below
        ``tol`` in absolute value.
    evaluate_every : int, default=5
        How often (in sweeps) CAVI evaluates its stopping objective; the
        evaluation costs about one sweep for noisy data.
    noise_update : {"marginal", "bessel-mean", "bessel-mode"}, \
            default="marginal"
        CAVI with noise: how each sweep infers the true counts. "marginal"
        integrates the noise out of each entry exactly, takes the expected
        true count at the rate E[mu], and scales the expected counts so that
        their total is the noisy total (an unbiased estimate of the true
        total). "bessel-mean" and "bessel-mode" are the algorithm of
        Schofield et al., with a gamma factor per entry for each noise rate
        and the mean or the mode of the Bessel-distributed min(y+, g-); on
        sparse counts under heavy noise (epsilon/N <= 2) the noise rates
        absorb most counts there, the fitted total rate shrinks and
        components coincide.
    chain_start : {"cavi", "random"}, default="cavi"
        MCMC only: where the chains start. "cavi" starts every chain from the
        factors of a CAVI fit of the same model to the same counts (with its
        "auto" prior shapes searched as for ``solver="cavi"``); "random" from
        random factors. Under heavy noise the sampler's chain moves slowly
        (each sweep's true counts are mostly the noise's, given the current
        rates), and from a random start on sparse counts every component
        settles on the same flat profile within the default sweeps (text at
        epsilon/N = 1); from CAVI's fit they stay apart. The CAVI fit costs a
        fraction of the sweeps'. With ``n_chains`` > 1 the chains
        share the start, so ``rhat_`` checks their agreement from one start;
        "random" gives dispersed starts.
    n_burn_in : int, default=1000
        MCMC sweeps discarded before keeping samples. Halfway through them,
        each component that coincides with another (cosine similarity above
        0.95, or the same 8 largest columns) is merged into it and restarted
        from the rows the other components fit worst (see Notes).
    n_kept_samples : int, default=500
        MCMC samples kept after burn-in (one per sweep) and averaged.
    n_chains : int, default=1
        Independent MCMC chains, run in parallel with joblib; with two or
        more, ``rhat_`` diagnoses convergence. Each chain orders its
        components its own way: they are matched to the first chain's (by
        cosine similarity) before the chains are pooled.
    n_jobs : int, default=None
        Number of joblib workers for the chains; None means 1 unless in a
        :obj:`joblib.parallel_backend` context, -1 means all processors.
    random_state : int, RandomState instance or None, default=None
        Initialisation, MCMC draws and, with ``privatize=True``, the noise:
        the stream starts in :meth:`fit` and :meth:`transform` and
        :meth:`score` continue it, so each release gets fresh noise. A fixed
        int gives the same result for any number of threads, and restarts the
        same noise at every :meth:`fit` (as in cross-validation): for real
        releases with ``privatize=True`` leave it None, since two different
        datasets released with the same noise reveal their difference. With
        None the noise is drawn from fresh operating-system entropy at every
        release, never from numpy's global state. For cryptographically
        secure, exact noise, release the counts with
        :class:`~skprivfact.GeometricPrivatizer` (``secure=True``) and fit
        them with ``privatize=False``.
    verbose : int or "bar", default=0
        Progress output, one line per report in the format shared by
        skprivfact's estimators: "iteration i of n, objective ..., elapsed
        ..., ETA ..." (the objective is the log-likelihood per entry the
        solver monitors). 1 reports about every tenth of the sweeps, 2 every
        evaluation; "bar" draws a tqdm bar (``pip install skprivfact[progress]``),
        or lines when tqdm is absent. MCMC chains run in joblib worker
        processes (``n_jobs`` > 1) print the solver's own lines; the CAVI fit
        the chains start from (``chain_start``) prints nothing.

    Attributes
    ----------
    components_ : ndarray of shape (n_components, n_features)
        Posterior mean of phi.
    component_shape_ : ndarray of shape (n_components, n_features)
        Shape of the gamma q(phi) (for MCMC, moment-matched to the samples).
    component_rate_ : ndarray of shape (n_components, n_features)
        Rate of the gamma q(phi).
    factor_prior_shape_ : ndarray of shape (n_components,)
        Prior shape of theta per component (fitted with empirical Bayes; the
        posterior mean of the component's drawn shape with
        ``sample_prior_shapes`` and MCMC).
    factor_prior_rate_ : ndarray of shape (n_components,)
        Prior rate of theta per component (resolved from "auto", fitted with
        empirical Bayes; the shape over the prior mean when the shape is
        drawn).
    component_prior_shape_ : ndarray of shape (n_components,)
        Prior shape of phi per component.
    component_prior_rate_ : ndarray of shape (n_components,)
        Prior rate of phi per component.
    prior_shape_search_ : dict or None
        The search of "auto" prior shapes (None when none was run):
        ``"shapes"``, ndarray of shape (n_candidates, 2), the (factor,
        component) pairs; ``"validation_score"``, their held-out
        log-likelihood per entry (NaN when passed over); and
        ``"max_component_similarity"``, the largest component similarity of
        each validation fit.
    alpha_ : float or None
        The noise ratio exp(-epsilon / sensitivity); None without privacy.
    count_scale_ : float
        ``noise_update="marginal"`` with noise: the factor that brings the
        expected true counts of the training rows, inferred by CAVI with the
        fitted components held fixed (for either solver), to their noisy
        total; :meth:`transform` applies the same factor to new rows in its
        CAVI sweeps. 1.0 for MCMC without noise and
        for CAVI without noise; with ``noise_update="bessel-mean"`` or
        ``"bessel-mode"``, the factor of the last sweep.
    max_component_similarity_ : float
        Largest cosine similarity between two rows of ``components_``: near
        1 means two components describe the same pattern (a warning naming
        the pair and how many of their 8 largest columns they share is raised
        above 0.95; ``verbose`` prints it). Distinct patterns of dense data,
        such as cell types that share their most expressed genes, can also
        exceed 0.95; their largest columns then differ.
    reconstruction_err_ : float
        ``sqrt(2 * D)``, D the generalized Kullback-Leibler divergence of the
        fitted rates from the training counts, as
        :class:`~sklearn.decomposition.NMF` reports it for
        ``beta_loss="kullback-leibler"`` (with the row factors at the end of
        the fit). With noise it is measured from the noisy counts clipped at
        zero: a fit to the released data, not to the clean counts (see
        :func:`~skprivfact.poisson_mf.heldout_loglik` for that). After
        :meth:`partial_fit`, that of the last block of rows.
    total_scale_ : float
        The factor the sampler's posterior mean of the components was
        multiplied by so that the training rows' fitted total rate is the
        released total (see Notes); 1 for CAVI and without noise. The
        posterior mean itself is ``components_ / total_scale_``.
    n_iter_ : int
        Number of sweeps run (MCMC: burn-in plus kept, per chain).
    n_steps_ : int
        CAVI: number of blocks of rows the components were fitted to, 1
        after :meth:`fit` and one more for each :meth:`partial_fit`.
    objective_trace_ : ndarray of shape (n_evaluations, 2)
        Iteration and mean log-likelihood per training entry at the posterior
        means (of the noisy data when private). For MCMC, the trace of the
        first chain, one row per kept sample.
    loglik_samples_ : ndarray of shape (n_chains, n_kept_samples)
        MCMC only: log-likelihood per entry of each kept sample.
    rhat_ : float
        MCMC only: split R-hat of the log-likelihood trace over the chains
        (NaN with fewer than 4 kept samples). Above 1.01 the fit warns with a
        :class:`~sklearn.exceptions.ConvergenceWarning` (run more burn-in
        sweeps or chains).
    n_features_in_ : int
        Number of features seen during :term:`fit`.
    feature_names_in_ : ndarray of shape (`n_features_in_`,)
        Names of features seen during :term:`fit`. Defined only when `X`
        has feature names that are all strings.

    See Also
    --------
    skprivfact.GeometricPrivatizer : Releases counts under the noise this model expects.
    sklearn.decomposition.NMF : Non-Bayesian factorization (KL loss = Poisson).

    Notes
    -----
    A private CAVI fit starts from the naive model (noise ignored, negatives
    clipped to 0) fitted by CAVI to convergence: from a random start, CAVI on
    noisy counts tends to settle where the noise absorbs most of the counts.
    ``n_iter_`` counts the private sweeps only. A CAVI fit that reaches
    ``max_iter`` before the ``tol`` criterion warns with a
    :class:`~sklearn.exceptions.ConvergenceWarning`, as
    :class:`~sklearn.decomposition.NMF` does. A noisy fit compares the total
    of its fitted training rates with the released total, which the
    symmetric noise leaves unbiased with standard deviation ``sqrt(2 n
    alpha) / (1 - alpha)`` over ``n`` entries (``verbose`` prints the
    three), and warns when the two differ by more than 3 of those standard
    deviations and more than 5% of the released total: the components then
    miss part of the signal or take part of the noise for signal. CAVI with
    ``noise_update="marginal"`` ends at the released total, and the
    sampler's components are scaled to it (``total_scale_``): its posterior
    mean strays from it either way on real counts, below where a few
    components cannot carry the large counts of sparse text (the noise law
    absorbs them) and above where they take noise on empty entries for rare
    columns. A
    released total below 0 by more than 3 standard deviations warns
    instead: noise on non-negative counts almost never gives it, so
    ``epsilon`` or ``sensitivity`` is not the one the counts were
    privatized with. float32 input gives float32 ``components_`` and
    factors (the solvers compute in float64 and the variational parameters
    stay float64).
    The sampler's chains start from a CAVI fit of the same model to the same
    counts (``chain_start``): under heavy noise a chain moves slowly, and
    from a random start on sparse text the drawn prior shapes and the
    components drift together to dense, flat profiles that all coincide.
    Gibbs sweeps rarely pull two coinciding components apart, so halfway
    through the burn-in the smaller of such a pair moves its factors onto
    the larger's profile and restarts from the rows the other components
    fit worst: its profile is their counts above the rates. The step draws
    nothing, and the kept sweeps remain a chain of the posterior from
    another start; ``verbose`` names the pairs restarted.
    :meth:`transform` runs CAVI sweeps for the new rows with q(phi) fixed
    (after MCMC, q(phi) is the gamma matching the mean and variance of the
    samples of phi). After MCMC it then continues from CAVI's factors with
    Gibbs sweeps of the sampler over the new rows (up to 100 discarded and
    500 kept, at most ``n_burn_in`` and ``n_kept_samples``), phi drawn from
    q(phi) in every sweep, and returns the mean of the kept factors: the
    sampler's posterior mean, as the fit's are (mean-field row inference
    under the sparse factor prior the sampler draws puts each row on too
    few components, which costs held-out likelihood). The sweeps' streams are
    fixed at fit time: the same rows give the same factors in every call
    (a row's factors depend on the other rows given with it only through
    the streams).

    Clean counts (``epsilon=None``) may be sparse; the work is then
    proportional to the non-zeros. Noisy counts are dense by nature (every
    entry carries noise): they are kept in the smallest integer type that
    holds them exactly (int16 for nearly all privatized counts, int32 or
    float64 beyond; int16 input is used as given, without a copy) and CAVI
    sweeps over blocks of rows, so that a fit needs, beyond its input, the
    memory of the factors, O((n_samples + n_features) x n_components), and
    of one block. A ``numpy.memmap`` is read block by block in every sweep.
    A Dask array chunked by rows is fitted on the current
    ``dask.distributed`` client (private CAVI, ``noise_update="marginal"``;
    ``pip install skprivfact[dask]``): each chunk is kept, compacted, on a
    worker, each sweep runs one task per chunk and the driver sums the
    chunks' column statistics in chunk order, so that the result equals
    the in-memory fit's (bit for bit when the chunks are the in-memory
    blocks of rows, to rounding otherwise). :meth:`partial_fit` folds in
    blocks of rows one at a time. The CAVI sweep costs six D x K x V matrix products,
    run in single precision on one BLAS thread (their rounding, about 1e-7
    relative, is far below the approximation's error; a fit agrees with an
    all-double one to about 1e-6), plus one fused pass over the entries in
    double precision (numba, parallel over rows).

    References
    ----------
    A. Schein, Z. S. Wu, A. Schofield, M. Zhou and H. Wallach, "Locally
    Private Bayesian Inference for Count Models", ICML 2019.

    A. Schofield, A. Schein, Z. S. Wu and H. Wallach, "A Variational
    Inference Approach to Locally Private Inference of Poisson Factorization
    Models", 2019.

    Z. Wang, M. Stephens et al., "Empirical Bayes Poisson matrix
    factorization" (EBPMF).

    Examples
    --------
    >>> from skprivfact.datasets import make_poisson_factorization
    >>> from skprivfact.poisson_mf import PrivatePoissonMF
    >>> X, X_noisy, theta, phi = make_poisson_factorization(
    ...     100, 40, 3, factor_shape=1.0, epsilon=2.0, random_state=0)
    >>> model = PrivatePoissonMF(n_components=3, epsilon=2.0, random_state=0)
    >>> factors = model.fit_transform(X_noisy)
    >>> factors.shape, model.components_.shape
    ((100, 3), (3, 40))
    """

    _noise_param_names = ("epsilon", "sensitivity", "privatize")

    _parameter_constraints: dict = {
        **LocalPrivacyEstimator._parameter_constraints,
        "n_components": [Interval(Integral, 1, None, closed="left")],
        "epsilon": [Interval(Real, 0, None, closed="neither"), None],
        "solver": [StrOptions({"cavi", "mcmc"})],
        "privatize": ["boolean"],
        "factor_prior_shape": [Interval(Real, 0, None, closed="neither"),
                               StrOptions({"auto"})],
        "factor_prior_rate": [Interval(Real, 0, None, closed="neither"), StrOptions({"auto"})],
        "component_prior_shape": [Interval(Real, 0, None, closed="neither"),
                                  StrOptions({"auto"})],
        "component_prior_rate": [
            Interval(Real, 0, None, closed="neither"),
            StrOptions({"auto"}),
        ],
        "empirical_bayes": ["boolean"],
        "sample_prior_shapes": ["boolean"],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "evaluate_every": [Interval(Integral, 1, None, closed="left")],
        "noise_update": [StrOptions({"marginal", "bessel-mean", "bessel-mode"})],
        "chain_start": [StrOptions({"cavi", "random"})],
        "n_burn_in": [Interval(Integral, 0, None, closed="left")],
        "n_kept_samples": [Interval(Integral, 1, None, closed="left")],
        "n_chains": [Interval(Integral, 1, None, closed="left")],
        "n_jobs": [Integral, None],
        "random_state": ["random_state"],
        "verbose": ["verbose", StrOptions({"bar"})],
    }

    def __init__(
        self,
        n_components=10,
        *,
        epsilon=None,
        sensitivity=1,
        solver="cavi",
        privatize=False,
        factor_prior_shape="auto",
        factor_prior_rate="auto",
        component_prior_shape="auto",
        component_prior_rate="auto",
        empirical_bayes=False,
        sample_prior_shapes=True,
        max_iter=200,
        tol=1e-4,
        evaluate_every=5,
        noise_update="marginal",
        chain_start="cavi",
        n_burn_in=1000,
        n_kept_samples=500,
        n_chains=1,
        n_jobs=None,
        random_state=None,
        verbose=0,
    ):
        self.n_components = n_components
        self.epsilon = epsilon
        self.sensitivity = sensitivity
        self.solver = solver
        self.privatize = privatize
        self.factor_prior_shape = factor_prior_shape
        self.factor_prior_rate = factor_prior_rate
        self.component_prior_shape = component_prior_shape
        self.component_prior_rate = component_prior_rate
        self.empirical_bayes = empirical_bayes
        self.sample_prior_shapes = sample_prior_shapes
        self.max_iter = max_iter
        self.tol = tol
        self.evaluate_every = evaluate_every
        self.noise_update = noise_update
        self.chain_start = chain_start
        self.n_burn_in = n_burn_in
        self.n_kept_samples = n_kept_samples
        self.n_chains = n_chains
        self.n_jobs = n_jobs
        self.random_state = random_state
        self.verbose = verbose

    def _check_params(self):
        # As every estimator checks them (a bool is not an epsilon).
        check_privacy_params(epsilon=self.epsilon, sensitivity=self.sensitivity)
        if self.epsilon is not None and self.epsilon / self.sensitivity < MIN_EPSILON_PER_UNIT:
            raise ValueError(
                f"epsilon / sensitivity = {self.epsilon / self.sensitivity:.3g} is below "
                f"{MIN_EPSILON_PER_UNIT:g}: the noise's standard deviation would exceed "
                f"{math.sqrt(2.0) / MIN_EPSILON_PER_UNIT:.2g} per count, which leaves "
                "nothing to fit (and 1 - alpha loses its precision in floating point)."
            )
        if self.epsilon is not None and self.epsilon / self.sensitivity > MAX_EPSILON_PER_UNIT:
            raise ValueError(
                f"epsilon / sensitivity = {self.epsilon / self.sensitivity:.3g} is above "
                f"{MAX_EPSILON_PER_UNIT:g}: the noise is zero in all but about "
                f"exp(-{MAX_EPSILON_PER_UNIT:g}) of counts, below what the noise model "
                "can represent. Fit such counts as clean counts (epsilon=None)."
            )
        if self.privatize and self.epsilon is None:
            raise ValueError(
                "privatize=True releases the input with geometric noise at "
                "epsilon; set epsilon (got None)."
            )
        if self.empirical_bayes and self.solver != "cavi":
            raise ValueError(
                "empirical_bayes=True needs solver='cavi'; the Gibbs sampler "
                "draws its prior shapes instead (sample_prior_shapes) "
                f"(got solver={self.solver!r})."
            )

    def _noise_ratio(self):
        if self.epsilon is None:
            return None
        return math.exp(-self.epsilon / self.sensitivity)

    def _check_input(self, X, reset, rng=None):
        """Validate X and bring it to the form the solvers take.

        Returns CSR float64 clean counts (``epsilon=None``) or the noisy
        counts as a dense C-contiguous array of the smallest exact dtype
        (``compact_counts``: int16 or int32, float64 beyond), plus the clean
        counts when ``privatize`` (for scoring), else None.
        """
        if not reset:
            # Other values would read the input as clean or noisy counts
            # against the model (privatize=False would model clean counts
            # given as noisy ones).
            self._check_noise_params_unchanged()
        dask = is_dask_array(X)
        if dask:
            X = self._check_dask_input(X, reset)
        elif self.epsilon is None or self.privatize:
            X = check_count_matrix(X, estimator=self, reset=reset)
        else:
            # compact integer input is kept as it is (no float64 copy)
            X = check_noisy_count_matrix(X, estimator=self, reset=reset,
                                         dtype=_NOISY_INPUT_DTYPES)
        if reset:
            # Once the input is valid: a refused fit keeps the fitted ones.
            self._record_noise_params()
        if dask:
            return X, None
        if self.epsilon is None:
            return sp.csr_matrix(X, dtype=np.float64), None
        if not self.privatize:
            return compact_counts(X), None
        dense = X.toarray() if sp.issparse(X) else np.asarray(X)
        dense = np.ascontiguousarray(dense, dtype=np.float64)
        noise = two_sided_geometric(
            self.epsilon, self.sensitivity, size=dense.shape, random_state=rng
        )
        return compact_counts(dense + noise), dense

    def _check_dask_input(self, X, reset):
        """Row blocks of a Dask array of noisy counts, compacted on the workers."""
        if self.epsilon is None or self.privatize or self.solver != "cavi" or (
                self.noise_update != "marginal"):
            raise ValueError(
                "A Dask array is fitted by private CAVI with noise_update='marginal' "
                "on counts privatized already (epsilon set, privatize=False, "
                f"solver='cavi'); got epsilon={self.epsilon!r}, "
                f"privatize={self.privatize!r}, solver={self.solver!r}, "
                f"noise_update={self.noise_update!r}."
            )
        if reset:
            self.n_features_in_ = int(X.shape[1])
            if hasattr(self, "feature_names_in_"):
                del self.feature_names_in_
        elif X.shape[1] != self.n_features_in_:
            raise ValueError(
                f"X has {X.shape[1]} features, but PrivatePoissonMF is expecting "
                f"{self.n_features_in_} features as input."
            )
        return DaskRowBlocks(X)

    def _priors(self, X, shapes):
        """Gamma priors ((shape, rate) of theta, of phi) per component for the
        prepared counts ``X`` and the (factor, component) prior ``shapes``,
        the "auto" rates resolved."""

        def per_component(value):
            return np.full(self.n_components, float(value))

        a, c = shapes
        b, d = self.factor_prior_rate, self.component_prior_rate
        if b == "auto" or d == "auto":
            # prior mean of a rate: K (a / b) (c / d) = the mean count
            n_entries = X.shape[0] * X.shape[1]
            total = (X.sum() if sp.issparse(X) or isinstance(X, np.ndarray)
                     else sum(X.map(block_sum, (), False)))
            mean_count = float(total) / n_entries
            alpha = self._noise_ratio()
            if alpha is not None:
                mean_count = max(mean_count, noise_std(alpha) / math.sqrt(n_entries))
            product = self.n_components * a * c / max(mean_count, _MIN_MEAN_COUNT)
            if b == "auto" and d == "auto":
                b = d = math.sqrt(product)
            elif b == "auto":
                b = product / d
            else:
                d = product / b
        return (
            (per_component(a), per_component(b)),
            (per_component(c), per_component(d)),
        )

    def _init_factors(self, shape, total, rng):
        """Random starting q(theta), q(phi) whose product matches the mean
        count ``total / (n_rows * n_cols)``."""
        n_rows, n_cols = shape
        K = self.n_components
        mean_count = max(float(total) / (n_rows * n_cols), 1e-3)
        scale = math.sqrt(mean_count / K)
        theta_shape = 1.0 + rng.uniform(0.0, 1.0, size=(n_rows, K))
        theta_rate = theta_shape / (scale * rng.uniform(0.5, 1.5, size=(n_rows, K)))
        phi_shape = 1.0 + rng.uniform(0.0, 1.0, size=(K, n_cols))
        phi_rate = phi_shape / (scale * rng.uniform(0.5, 1.5, size=(K, n_cols)))
        return theta_shape, theta_rate, phi_shape, phi_rate

    @contextlib.contextmanager
    def _progress(self, pattern, total, desc):
        """Turn the solver's printed progress into the shared format."""
        if not self.verbose:
            yield
            return
        out = sys.stdout
        relay = SolverLineRelay(
            pattern,
            lambda phase: Progress(
                total, verbose=self.verbose, stream=out,
                desc=desc if phase is None else f"{desc} chain {phase}",
            ),
            stream=out,
        )
        try:
            with contextlib.redirect_stdout(relay):
                yield
        finally:
            relay.close()

    def _fit(self, X, return_factors=True):
        self._check_params()
        dtype = _output_dtype(X)
        rng = check_random_state(self.random_state)
        # Unseeded noise comes from fresh entropy (None), never from numpy's
        # global state, which a np.random.seed elsewhere would replay; a seed
        # gives one stream that transform and score continue, so every
        # release made with privatize=True gets fresh noise.
        noise_rng = None if self.random_state is None else rng
        X, _ = self._check_input(X, reset=True, rng=noise_rng)
        self._noise_rng = noise_rng if self.privatize else None
        n_rows, n_cols = X.shape
        if self.n_components > min(n_rows, n_cols):
            warnings.warn(
                f"n_components={self.n_components} is larger than the smaller "
                f"dimension of X {X.shape}; the extra components are not identifiable.",
                UserWarning,
            )
        candidates = self._prior_shape_candidates(X, rng, dtype)
        row_factors = self._fit_candidates(X, candidates, rng, dtype, return_factors)
        if isinstance(X, DaskRowBlocks):
            X.release()
        return None if row_factors is None else row_factors.astype(dtype, copy=False)

    def _fit_candidates(self, X, candidates, rng, dtype, return_factors):
        """Fit the prepared rows ``X`` with the (factor, component) prior
        shape pair of ``candidates`` (several: as ``_fit_first_apart`` tries
        them), then report the similarity of the components and set the
        count scale and the online statistics; the rows' factors when
        ``return_factors`` (or MCMC)."""
        if len(candidates) == 1:
            row_factors = self._fit_solver(X, candidates[0], rng, dtype)
        else:
            row_factors = self._fit_first_apart(X, candidates, rng, dtype)
        alpha = self.alpha_
        if self.verbose:
            print(f"largest cosine similarity between two components: "
                  f"{self.max_component_similarity_:.4f}")
        if self.max_component_similarity_ > SIMILARITY_WARNING:
            # Distinct patterns of dense data can be this similar (cell types
            # sharing their most expressed genes): the pair and the overlap of
            # their largest columns let the user tell.
            _, first, second, shared = most_similar_components(self.components_)
            n_top = min(_N_TOP_COLUMNS, self.components_.shape[1])
            warnings.warn(
                f"Components {first} and {second} have cosine similarity "
                f"{self.max_component_similarity_:.4f} > {SIMILARITY_WARNING} and "
                f"share {shared} of their {n_top} largest columns: they may describe "
                "the same pattern. Fewer components, more data or (with privacy) a "
                "larger epsilon give distinct ones.",
                UserWarning,
            )
        # the release's total, read once for the check and partial_fit's scale
        released = 0.0 if alpha is None else _noisy_total(X)
        self.total_scale_ = 1.0
        if alpha is not None and self.solver == "mcmc":
            self._scale_sampler_to_release(X, row_factors, released)
        if alpha is not None:
            self._check_fitted_total(released, X.shape[0] * X.shape[1])
        if alpha is not None and self.noise_update == "marginal":
            # transform scales the expected true counts of new rows by the
            # factor that brings those of the training rows, inferred as
            # transform infers rows, to their noisy total. The joint sweeps'
            # last factor does not: the row problem with q(phi) fixed has a
            # flat likelihood in the rate where most true counts are zero
            # (E[y | noisy] is about the rate whatever the rate), and from
            # transform's start it settles well above the noisy total on
            # sparse counts under heavy noise.
            self.count_scale_ = self._infer_rows(X, fit_scale=True)[1]
        elif self.solver == "mcmc":
            self.count_scale_ = 1.0
        if self.solver == "cavi" and return_factors:
            # the training rows' factors are those transform gives them: the
            # joint sweeps stop with theta a step behind phi, and the row
            # problem with q(phi) fixed has more than one fixed point, so
            # fit_transform(X) and transform(X) would otherwise disagree
            row_factors = self._infer_rows(X)
        if self.solver == "cavi":
            self._start_online_statistics(released)
        else:
            # partial_fit after this fit starts afresh, not from an earlier
            # CAVI fit's statistics
            for name in ("_component_statistics", "_scale_totals", "n_steps_"):
                self.__dict__.pop(name, None)
        return row_factors

    def _scale_sampler_to_release(self, X, row_factors, released):
        """Scale the sampler's components so that the fitted total rate of the
        training rows is the ``released`` total, an unbiased estimate of the
        clean total (``total_scale_`` records the factor).

        The posterior mean's total strays from it either way on real counts:
        below where a few components cannot carry the large counts, which
        the noise law then absorbs, and above where they take noise on empty
        entries for rare columns. The scale is a function of the release;
        CAVI's marginal noise update ends at the released total by itself.
        """
        fitted = self._fitted_total
        if not (released > 0.0 and fitted > 0.0):
            return
        scale = released / fitted
        self.total_scale_ = scale
        self.components_ = (self.components_ * scale).astype(self.components_.dtype,
                                                              copy=False)
        self.component_rate_ = self.component_rate_ / scale
        self._fitted_total = released
        self.reconstruction_err_ = _reconstruction_error(X, row_factors, self.components_)
        if self.verbose:
            print(f"components scaled by {scale:.4g} to the released total")

    def _check_fitted_total(self, released, n_entries):
        """Report the fitted total rate against the total ``released`` of the
        ``n_entries`` noisy counts, and warn when the two differ by more than
        the noise explains (or when the noisy total is below 0 by more than
        it explains).

        The noisy total is unbiased and its noise, a sum of independent
        two-sided geometric draws, has standard deviation sqrt(2 n alpha) /
        (1 - alpha) over n entries; both totals are functions of the release.
        """
        fitted = self._fitted_total
        total_std = noise_std(self.alpha_) * math.sqrt(n_entries)
        gap = fitted - released
        if self.verbose:
            print(f"fitted total rate {fitted:.6g}, released total {released:.6g} "
                  f"(noise standard deviation {total_std:.3g})")
        if released < -TOTAL_WARNING_STDS * total_std:
            warnings.warn(
                f"The released total {released:.6g} is {-released / total_std:.1f} "
                f"standard deviations of its noise ({total_std:.3g}) below 0, which "
                "noise on non-negative counts almost never gives: were the counts "
                "privatized with this epsilon and sensitivity?",
                UserWarning,
            )
        elif abs(gap) > max(TOTAL_WARNING_STDS * total_std,
                            TOTAL_WARNING_SHARE * abs(released)):
            warnings.warn(
                f"The fitted total rate {fitted:.6g} is {abs(gap):.6g} "
                f"{'below' if gap < 0 else 'above'} the released total {released:.6g}, "
                f"{abs(gap) / total_std:.1f} times the standard deviation of the noise "
                f"in that total ({total_std:.3g}): the components "
                f"{'miss part of the signal' if gap < 0 else 'take part of the noise for signal'}"
                ". noise_update='marginal' (and the sampler) scales the fit to the "
                "released total.",
                UserWarning,
            )

    def _components_apart(self):
        """Whether no two components coincide: cosine similarity at most
        SIMILARITY_WARNING and, with more columns than that, no two with the
        same _N_TOP_COLUMNS largest columns (with fewer, all rows share them)."""
        if self.max_component_similarity_ > SIMILARITY_WARNING:
            return False
        if self.components_.shape[1] <= _N_TOP_COLUMNS:
            return True
        shared = same_top_columns(self.components_)
        np.fill_diagonal(shared, False)
        return not shared.any()

    def _fit_first_apart(self, X, candidates, rng, dtype):
        """``_fit_solver`` with each prior shape pair of ``candidates`` in
        turn until a fit's components stay apart; when none do, the fit with
        the least similar components (refitted from the same random state).
        Only the kept fit's warnings reach the user."""
        passed_over = []
        for shapes in candidates + [None]:
            if shapes is None:
                # every pair's components coincide: the least similar again
                least = min(passed_over, key=lambda item: item[0])
                if least is passed_over[-1]:
                    break
                _, state, shapes = least
                rng.set_state(state)
            state = rng.get_state()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                row_factors = self._fit_solver(X, shapes, rng, dtype)
            kept_warnings = caught
            if self._components_apart() or len(passed_over) == len(candidates):
                break
            passed_over.append((self.max_component_similarity_, state, shapes))
            if self.verbose:
                shared = ("" if self.max_component_similarity_ > SIMILARITY_WARNING else
                          f", two components with the same {_N_TOP_COLUMNS} largest columns")
                print(f"prior shapes ({shapes[0]:g}, {shapes[1]:g}) on all rows: largest "
                      f"cosine similarity {self.max_component_similarity_:.4f}{shared}, "
                      "passed over")
        for caught_warning in kept_warnings:
            warnings.warn_explicit(caught_warning.message, caught_warning.category,
                                   caught_warning.filename, caught_warning.lineno)
        return row_factors

    def _prior_shape_candidates(self, X, rng, dtype):
        """The (factor, component) prior shape pairs to fit to the prepared
        rows ``X`` in turn, the first whose components stay apart being kept:
        the given shapes, or for "auto" the result of the search on a
        validation split of the rows (see ``factor_prior_shape``)."""
        factor, component = self.factor_prior_shape, self.component_prior_shape
        self.prior_shape_search_ = None
        if factor != "auto" and component != "auto":
            return [(factor, component)]
        if factor == "auto" and component == "auto":
            pairs = list(_SHAPE_PAIRS)
        elif factor == "auto":
            pairs = [(value, component) for value in _FACTOR_SHAPES]
        else:
            pairs = [(factor, value) for value in _COMPONENT_SHAPES]
        n_rows = X.shape[0]
        if (self.solver != "cavi" or self.empirical_bayes or n_rows < _SHAPE_SEARCH_MIN_ROWS
                or isinstance(X, DaskRowBlocks) or _backed_by_file(X)):
            return pairs[:1]
        n_validation = max(2, round(_SHAPE_VALIDATION_SHARE * n_rows))
        order = rng.permutation(n_rows)
        validation_rows, fit_rows = np.sort(order[:n_validation]), np.sort(order[n_validation:])
        validation = X[validation_rows]
        # dense noisy counts: the rows are gathered block by block, not copied
        rest = (X[fit_rows] if sp.issparse(X) else RowSubsetBlocks(X, fit_rows))
        seed = int(rng.randint(np.iinfo(np.int32).max))
        scores, similarities = [], []
        for shapes in pairs:
            # X is prepared (privatized already with privatize=True): the
            # search fits and scores that one release, it makes no other
            model = clone(self).set_params(
                factor_prior_shape=shapes[0], component_prior_shape=shapes[1],
                privatize=False, verbose=0)
            model.n_features_in_, model._noise_rng = X.shape[1], None
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model._fit_candidates(rest, [shapes], check_random_state(seed), dtype,
                                      return_factors=False)
            similarities.append(model.max_component_similarity_)
            scores.append(heldout_loglik(model, validation, random_state=seed)
                          if similarities[-1] <= SIMILARITY_WARNING else np.nan)
        scores = np.array(scores)
        ranked = sorted(np.flatnonzero(~np.isnan(scores)), key=lambda i: -scores[i])
        if self.verbose:
            for i, shapes in enumerate(pairs):
                print(f"prior shapes ({shapes[0]:g}, {shapes[1]:g}): validation "
                      f"log-likelihood per entry {scores[i]:.5f}, largest cosine "
                      f"similarity {similarities[i]:.4f}")
        self.prior_shape_search_ = {
            "shapes": np.array(pairs, dtype=np.float64),
            "validation_score": scores,
            "max_component_similarity": np.array(similarities),
        }
        # then those whose validation fits coincided, the sparsest first: a
        # fit to all the rows starts elsewhere and may keep them apart
        candidates = [pairs[i] for i in ranked] + [
            pair for i, pair in enumerate(pairs) if i not in ranked]
        # whether CAVI's components coincide can depend on the random start
        # alone (sparse text under heavy noise): the first pair gets more
        # starts before the next pair is tried
        return candidates[:1] * (1 + _SHAPE_RESTARTS) + candidates[1:]

    def _cavi_start(self, X, rng):
        """(row factors, components) of a CAVI fit of this model to the
        prepared rows ``X``, the sampler's start (see ``chain_start``)."""
        model = clone(self).set_params(solver="cavi", privatize=False, verbose=0)
        model.n_features_in_, model._noise_rng = X.shape[1], None
        start_rng = check_random_state(int(rng.randint(np.iinfo(np.int32).max)))
        with warnings.catch_warnings():
            # the sampler's own fit is what the user is told about
            warnings.simplefilter("ignore")
            candidates = model._prior_shape_candidates(X, start_rng, np.float64)
            row_factors = model._fit_candidates(X, candidates, start_rng, np.float64,
                                                return_factors=True)
        return row_factors, model.components_

    def _fit_solver(self, X, shapes, rng, dtype):
        """Fit the solver to the prepared rows ``X`` with the given prior
        shapes and set the fitted attributes (``components_`` of ``dtype``);
        the rows' factors for MCMC, else None."""
        alpha = self._noise_ratio()
        theta_prior, phi_prior = self._priors(X, shapes)
        solver_verbose = 1 if self.verbose else 0  # the solvers take an int
        if self.solver == "cavi":
            # the sum of the clipped counts when noisy, block by block
            total = X.sum() if alpha is None else sum(
                _row_blocks(X).map(block_sum, (), True))
            theta_shape, theta_rate, phi_shape, phi_rate = self._init_factors(
                X.shape, total, rng
            )
            if alpha is not None:
                # start from the converged naive model (see Notes)
                with self._progress(_CAVI_LINE, self.max_iter, "CAVI naive start"):
                    warm = fit_cavi(
                        X, None, theta_shape, theta_rate,
                        phi_shape, phi_rate, theta_prior=theta_prior, phi_prior=phi_prior,
                        max_iter=self.max_iter, tol=self.tol,
                        evaluate_every=self.evaluate_every, verbose=solver_verbose,
                        print_prefix="naive start, ",
                    )
                theta_shape, theta_rate = warm["theta_shape"], warm["theta_rate"]
                phi_shape, phi_rate = warm["phi_shape"], warm["phi_rate"]
            desc = "CAVI" if alpha is None else "private CAVI"
            with self._progress(_CAVI_LINE, self.max_iter, desc):
                result = fit_cavi(
                    X, alpha, theta_shape, theta_rate, phi_shape, phi_rate,
                    theta_prior=theta_prior, phi_prior=phi_prior,
                    empirical_bayes=self.empirical_bayes, max_iter=self.max_iter,
                    tol=self.tol, evaluate_every=self.evaluate_every,
                    noise_update=self.noise_update, verbose=solver_verbose,
                )
            if self.tol > 0 and result["n_iter"] == self.max_iter:
                warnings.warn(
                    f"CAVI stopped at max_iter={self.max_iter} sweeps before the "
                    f"relative change of the objective fell below tol={self.tol}; "
                    "increase max_iter (or tol).",
                    ConvergenceWarning,
                )
            self.component_shape_ = result["phi_shape"]
            self.component_rate_ = result["phi_rate"]
            self.factor_prior_shape_, self.factor_prior_rate_ = result["theta_prior"]
            self.component_prior_shape_, self.component_prior_rate_ = result["phi_prior"]
            self.n_iter_ = result["n_iter"]
            self.count_scale_ = result["count_scale"]
            self.objective_trace_ = np.array(result["objective_trace"]).reshape(-1, 2)
            self.__dict__.pop("_row_sampler_seed", None)
            row_factors = None  # below, once the fitted attributes are set
        else:
            from ._mcmc import fit_mcmc_chains

            start = self._cavi_start(X, rng) if self.chain_start == "cavi" else None
            with self._progress(_MCMC_LINE, self.n_burn_in + self.n_kept_samples,
                                "MCMC"):
                result = fit_mcmc_chains(
                    X if alpha is None else X.astype(np.float64), alpha, self.n_components,
                    theta_prior=theta_prior, phi_prior=phi_prior,
                    n_burn_in=self.n_burn_in, n_kept=self.n_kept_samples,
                    n_chains=self.n_chains, n_jobs=self.n_jobs, rng=rng,
                    verbose=solver_verbose, sample_shapes=self.sample_prior_shapes,
                    start=start,
                )
            if result["rhat"] > RHAT_WARNING_THRESHOLD:  # False for NaN
                warnings.warn(
                    f"The split R-hat of the log-likelihood trace is "
                    f"{result['rhat']:.3f}, above {RHAT_WARNING_THRESHOLD}: the "
                    "chains have not mixed; increase n_burn_in, n_kept_samples or "
                    "n_chains.",
                    ConvergenceWarning,
                )
            phi_mean, phi_var = result["phi_mean"], result["phi_var"]
            phi_var = np.maximum(phi_var, 1e-12 * phi_mean**2 + 1e-300)
            self.component_shape_ = phi_mean**2 / phi_var
            self.component_rate_ = phi_mean / phi_var
            self.factor_prior_shape_, self.factor_prior_rate_ = result["theta_prior"]
            self.component_prior_shape_, self.component_prior_rate_ = result["phi_prior"]
            self.n_iter_ = self.n_burn_in + self.n_kept_samples
            self.loglik_samples_ = result["loglik_samples"]
            self.rhat_ = result["rhat"]
            self.objective_trace_ = np.column_stack(
                [
                    self.n_burn_in + np.arange(1, self.n_kept_samples + 1),
                    self.loglik_samples_[0],
                ]
            )
            row_factors = result["theta_mean"]
            # the streams of transform's Gibbs sweeps: the same rows get the
            # same factors in every call
            self._row_sampler_seed = int(rng.randint(np.iinfo(np.int32).max))
        self.components_ = (self.component_shape_ / self.component_rate_).astype(
            dtype, copy=False)
        self.alpha_ = alpha
        self.max_component_similarity_ = max_cosine_similarity(self.components_)
        fitted_row_factors = (
            result["theta_shape"] / result["theta_rate"] if self.solver == "cavi"
            else result["theta_mean"]
        )
        self.reconstruction_err_ = _reconstruction_error(X, fitted_row_factors,
                                                         self.components_)
        self._fitted_total = float(
            np.sum(fitted_row_factors, axis=0) @ np.sum(self.components_, axis=1,
                                                        dtype=np.float64))
        return row_factors

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None, **fit_params):
        """Fit the model to the (noisy) counts ``X``.

        Parameters
        ----------
        X : {array-like, sparse matrix, dask array} of shape (n_samples, n_features)
            Integer counts: non-negative with ``epsilon=None`` or
            ``privatize=True``, privatized (possibly negative) otherwise. A
            Dask array of privatized counts is fitted on the current
            ``dask.distributed`` client (see Notes).
        y : Ignored
            Not used, present for API consistency by convention.
        **fit_params : dict
            None accepted: ``sample_weight`` raises a TypeError saying why it
            has no meaning here (each row is one record's counts).

        Returns
        -------
        self : object
            Fitted estimator.
        """
        check_no_fit_params(self, fit_params, _SAMPLE_WEIGHT_REASON)
        self._fit(X, return_factors=False)
        return self

    @_fit_context(prefer_skip_nested_validation=True)
    def fit_transform(self, X, y=None, **fit_params):
        """Fit the model and return the posterior mean of the training rows' factors.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Integer counts, as in :meth:`fit`.
        y : Ignored
            Not used, present for API consistency by convention.
        **fit_params : dict
            None accepted, as in :meth:`fit`.

        Returns
        -------
        X_new : ndarray of shape (n_samples, n_components)
            E[theta] of each row: for CAVI, those :meth:`transform` gives the
            same rows after the fit (found with q(phi) fixed from the same
            start); for MCMC, the mean of the samples, drawn jointly with the
            components. After MCMC, :meth:`transform` of the same rows draws
            them again with the components drawn from their fitted
            posterior: the two differ by Monte Carlo error, so features to be
            compared across training and test rows are best all taken from
            :meth:`transform`.
        """
        check_no_fit_params(self, fit_params, _SAMPLE_WEIGHT_REASON)
        return self._fit(X)

    def _infer_rows(self, X, fit_scale=False, return_result=False):
        """E[theta] for prepared rows X with the components held fixed: CAVI
        with q(phi) fixed, then for a sampler's fit Gibbs sweeps from there
        with phi drawn from its fitted posterior; with ``fit_scale``, the
        CAVI factors and the count scale fitted on X; with
        ``return_result``, CAVI's result instead."""
        alpha = self.alpha_
        n_rows = X.shape[0]
        K = self.n_components
        phi_mean = self.components_
        if alpha is None:
            row_mass = np.asarray(X.sum(axis=1)).ravel()
        else:
            row_mass = np.concatenate(list(_row_blocks(X).map(block_row_sums, (), False)))
        start = np.maximum(row_mass, 1e-3) / max(phi_mean.sum(), 1e-300)
        # Deterministic start (no random_state at transform time): equal
        # factors matching each row's total; q(phi) breaks the symmetry.
        theta_shape = np.ones((n_rows, K))
        theta_rate = np.repeat((1.0 / start)[:, None], K, axis=1)
        theta_prior = (self.factor_prior_shape_, self.factor_prior_rate_)
        phi_prior = (self.component_prior_shape_, self.component_prior_rate_)
        result = fit_cavi(
            X, alpha, theta_shape, theta_rate,
            self.component_shape_, self.component_rate_,
            theta_prior=theta_prior, phi_prior=phi_prior,
            update_components=False, max_iter=self.max_iter, tol=self.tol,
            evaluate_every=self.evaluate_every,
            noise_update=self.noise_update,
            count_scale=None if fit_scale else self.count_scale_, verbose=0,
        )
        if return_result:
            return result
        row_factors = result["theta_shape"] / result["theta_rate"]
        if fit_scale:
            return row_factors, result["count_scale"]
        row_sampler_seed = self.__dict__.get("_row_sampler_seed")
        if row_sampler_seed is not None:
            # after a sampler's fit, Gibbs sweeps from CAVI's factors: on its
            # own, mean-field row inference under the sampler's sparse factor
            # prior puts each row on too few components, and held-out counts
            # paid for it
            from ._mcmc import infer_rows

            row_factors = infer_rows(
                X, alpha,
                self.component_shape_, self.component_rate_, theta_prior, row_factors,
                n_burn_in=min(self.n_burn_in, _ROW_SAMPLER_BURN_IN),
                n_kept=min(self.n_kept_samples, _ROW_SAMPLER_KEPT),
                seed=row_sampler_seed,
            )
        return row_factors

    def _start_online_statistics(self, noisy_total):
        """The statistics that partial_fit accumulates, from a fit to counts
        of total ``noisy_total`` (0 without noise): phi's posterior minus
        its prior, and the noisy and expected totals behind the count
        scale."""
        self._component_statistics = (
            self.component_shape_ - self.component_prior_shape_[:, None],
            self.component_rate_[:, 0] - self.component_prior_rate_,
        )
        self._scale_totals = (noisy_total, noisy_total / self.count_scale_)
        self.n_steps_ = 1

    def _check_partial_fit(self):
        # As scikit-learn's MLP hides partial_fit from solvers without it:
        # hasattr(model, "partial_fit") is then False.
        if self.solver != "cavi" or (
                self.epsilon is not None and self.noise_update != "marginal"):
            raise AttributeError(
                "partial_fit needs solver='cavi' and, with noise, "
                f"noise_update='marginal'; got solver={self.solver!r}, "
                f"noise_update={self.noise_update!r}."
            )
        return True

    @available_if(_check_partial_fit)
    @_fit_context(prefer_skip_nested_validation=True)
    def partial_fit(self, X, y=None, **fit_params):
        """Update the model with a block of rows, without keeping them.

        The first call (or :meth:`fit`) fits its rows as :meth:`fit` does
        ("auto" prior shapes are chosen on those rows alone).
        Each later call infers the new rows' factors with q(phi) held fixed,
        as :meth:`transform` does (with the count scale fitted on the
        block), and adds what the rows tell about the components, their
        expected sub-count totals per component and column and the sums of
        their factors, to those of the rows seen before: q(phi) is then the
        posterior given every row seen so far, each block's statistics taken
        at the components of its time (online variational Bayes, in the
        manner of :class:`~sklearn.decomposition.MiniBatchNMF`'s
        ``partial_fit``). A stream of privatized rows is so folded in with
        memory that does not grow with the number of rows. CAVI with
        ``noise_update="marginal"`` (or without noise) only.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            A block of integer counts, as in :meth:`fit`.
        y : Ignored
            Not used, present for API consistency by convention.
        **fit_params : dict
            None accepted, as in :meth:`fit`.

        Returns
        -------
        self : object
            The updated estimator.
        """
        check_no_fit_params(self, fit_params, _SAMPLE_WEIGHT_REASON)
        if not hasattr(self, "_component_statistics"):
            self._fit(X, return_factors=False)
            return self
        X, _ = self._check_input(X, reset=False, rng=self._noise_rng)
        result = self._infer_rows(X, fit_scale=True, return_result=True)
        block_scale = result["count_scale"]
        col_totals, exposure = column_statistics(
            X, self.alpha_, result["theta_shape"], result["theta_rate"],
            self.component_shape_, self.component_rate_, self.noise_update,
            block_scale,
        )
        shape_stats, rate_stats = self._component_statistics
        shape_stats = shape_stats + col_totals
        rate_stats = rate_stats + exposure
        self.component_shape_ = self.component_prior_shape_[:, None] + shape_stats
        self.component_rate_ = np.repeat(
            (self.component_prior_rate_ + rate_stats)[:, None], X.shape[1], axis=1)
        dtype = self.components_.dtype
        self.components_ = (self.component_shape_ / self.component_rate_).astype(
            dtype, copy=False)
        self._component_statistics = (shape_stats, rate_stats)
        if self.alpha_ is not None:
            block_noisy = _noisy_total(X)
            noisy_total, expected_total = self._scale_totals
            noisy_total += block_noisy
            expected_total += block_noisy / block_scale
            self._scale_totals = (noisy_total, expected_total)
            self.count_scale_ = noisy_total / expected_total
        self.max_component_similarity_ = max_cosine_similarity(self.components_)
        self.reconstruction_err_ = _reconstruction_error(
            X, result["theta_shape"] / result["theta_rate"], self.components_)
        self.n_steps_ += 1
        if isinstance(X, DaskRowBlocks):
            X.release()
        return self

    def transform(self, X):
        """Posterior mean of the factors of new rows, components held fixed.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Integer counts of the kind given to :meth:`fit` (privatized here
            first when ``privatize=True``).

        Returns
        -------
        X_new : ndarray of shape (n_samples, n_components)
            E[theta] of each row: CAVI's with q(phi) fixed, or after MCMC
            the mean of Gibbs sweeps over the rows (see Notes).

        Notes
        -----
        The sweeps stop on the objective of all the rows given (``tol``, as
        for :meth:`fit`, and as scikit-learn's ``NMF.transform`` stops), so a
        row's factors can differ by a little with the rows it is transformed
        with; a smaller ``tol`` takes every row nearer CAVI's fixed point.
        """
        check_is_fitted(self)
        dtype = _output_dtype(X)
        X, _ = self._check_input(X, reset=False, rng=self._noise_rng)
        return self._infer_rows(X).astype(dtype, copy=False)

    def inverse_transform(self, X):
        """Poisson rates of rows from their factors: ``X @ components_``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_components)
            Row factors, as returned by :meth:`transform`.

        Returns
        -------
        X_original : ndarray of shape (n_samples, n_features)
            The rows' expected (clean) counts under the fitted model.
        """
        check_is_fitted(self)
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != self.components_.shape[0]:
            raise ValueError(
                f"X has shape {X.shape}; expected (n_samples, "
                f"{self.components_.shape[0]}) row factors."
            )
        return X @ self.components_

    def score(self, X, y=None):
        """Mean log-likelihood per entry of ``X`` under the fitted model.

        The rows' factors are inferred with :meth:`transform`; the score is
        the exact log-likelihood at the posterior means: Poisson for clean
        counts, Poisson convolved with the two-sided geometric noise for
        noisy counts (a closed form in Poisson CDFs, evaluated in log
        space). With ``privatize=True``, ``X`` is raw counts: the factors are inferred from a fresh
        privatized release of ``X`` and the score is the Poisson
        log-likelihood of the clean ``X``, the utility measure of a
        privacy-utility curve.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Counts of the kind given to :meth:`fit`.
        y : Ignored
            Not used, present for API consistency by convention.

        Returns
        -------
        score : float
            Mean log-likelihood per entry (higher is better).
        """
        check_is_fitted(self)
        X_model, X_clean = self._check_input(X, reset=False, rng=self._noise_rng)
        row_factors = self._infer_rows(X_model)
        # the kernels take float64 (components_ is float32 after float32 input)
        components = self.components_.astype(np.float64, copy=False)
        n_entries = X_model.shape[0] * X_model.shape[1]
        if self.privatize:
            total = log_likelihood_sum(
                sp.csr_matrix(X_clean), None, row_factors, components
            )
        else:
            total = log_likelihood_sum(X_model, self.alpha_, row_factors, components)
        return float(total / n_entries)

    @property
    def _n_features_out(self):
        return self.components_.shape[0]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        # noisy counts may be negative: only the non-private model is positive-only
        tags.input_tags.positive_only = self.epsilon is None or self.privatize
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        return tags
