"""Release mechanisms shared by every skprivfact estimator.

Central model: per-record contributions are clipped (:func:`clip_rows`,
:func:`clip_frobenius`), summed by the caller, and released with
:func:`gaussian_mechanism`, whose noise std follows :func:`gaussian_noise_scales`;
matrix statistics get symmetric noise (:func:`symmetric_gaussian_noise`) and are
repaired by :func:`project_psd`, which is post-processing and costs no privacy.

Local model: :func:`two_sided_geometric` draws the noise of the geometric
mechanism, with an exact integer-only sampler for ``secure=True``.

No function here keeps a privacy budget: the estimator that calls a mechanism
records the release in its own accountant.
"""

import functools
import math
import random
import secrets
from array import array
from fractions import Fraction
from numbers import Integral, Rational

import numpy as np
import scipy.sparse as sp
from sklearn.utils import check_random_state

from ._clip_kernels import clip_rows_inplace, scaled_row_norms
from .exceptions import PrivacyLeakWarning
from .utils._validation import (
    check_non_negative_number,
    check_positive_bound,
    check_privacy_params,
)

__all__ = [
    "PrivacyLeakWarning",
    "clip_frobenius",
    "clip_rows",
    "discrete_gaussian",
    "gaussian_mechanism",
    "gaussian_noise_scales",
    "project_psd",
    "symmetric_gaussian_noise",
    "two_sided_geometric",
]

# Half the distance from 1.0 to the next float64: the relative error of one
# correctly rounded operation.
_UNIT_ROUNDOFF = 2.0**-53

# Below this epsilon / sensitivity the noise (mean absolute value about
# sensitivity / epsilon) would no longer fit in int64 with certainty.
_MIN_NOISE_RATIO = 1e-12

# Below this norm bound clipped rows may hold subnormal entries, whose
# rounding the clipping margin does not cover: those are checked again.
_SUBNORMAL_NORM = 2.0**-960
# The per-row clipping factor is applied in one product when it lies here.
_FACTOR_RANGE = (2.0**-900, 2.0**900)

# The secure Gaussian mechanism rounds each statistic to a grid whose step
# moves it by at most this fraction of the noise scale, and adds that much to
# the noise (see _secure_block_noise).
_SECURE_GRID_FRACTION = 1e-3

# 64-bit words read from the randomness source per refill of the secure sampler.
_SECURE_WORDS_PER_REFILL = 4096


# Clipping ------------------------------------------------------------------


def _as_float_array(array_like, name):
    """A float64 copy of a dense array-like (finiteness not checked)."""
    if sp.issparse(array_like):
        raise ValueError(f"{name} must be a dense array; got a sparse matrix.")
    try:
        return np.array(array_like, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be an array of real numbers: {exc}") from exc


def _non_finite_error(name):
    return ValueError(f"{name} must not contain NaN or infinity.")


def _as_finite_float_array(array_like, name):
    values = _as_float_array(array_like, name)
    if not np.all(np.isfinite(values)):
        raise _non_finite_error(name)
    return values


def _row_clip_arguments(n_features, max_norm):
    """The norm bound's arguments of the clipping kernels
    (:func:`~skprivfact._clip_kernels.clip_row_inplace`) for rows of
    ``n_features`` entries: ``(max_norm, error_bound, factor_low,
    factor_high)``, or None for norm bounds at or below ``2**-960``, whose
    clipped rows may hold subnormal entries: those take the numpy path, which
    checks them again. ``max_norm`` is checked (positive, finite) and passed
    on as a float."""
    max_norm = check_positive_bound(max_norm, "max_norm")
    if max_norm <= _SUBNORMAL_NORM:
        return None
    return (
        max_norm,
        _norm_relative_error_bound(n_features),
        _FACTOR_RANGE[0],
        _FACTOR_RANGE[1],
    )


def _clip_records_inplace(rows, max_norm, name):
    """Clip the rows of the float64 2-D array ``rows`` in place; raise on NaN or infinity.

    The kernel (one pass per row) for norm bounds whose clipped entries are
    normal floats; below that, the numpy path, which checks subnormal
    results again.
    """
    arguments = _row_clip_arguments(rows.shape[1], max_norm)
    if arguments is None:
        if not np.all(np.isfinite(rows)):
            raise _non_finite_error(name)
        return _clip_rows_inplace(rows, max_norm)
    all_finite = clip_rows_inplace(rows, *arguments)
    if not all_finite:
        raise _non_finite_error(name)
    return rows


def _norm_relative_error_bound(n_features):
    """Bound on the relative error of :func:`_scaled_row_norms`, with margin.

    The reciprocal of the row maximum, the product and the square cost at most
    5 roundings per entry, the sum of ``n_features`` non-negative terms in any
    order at most ``n_features - 1``, and the square root halves the total and
    adds one: about ``(n_features + 6) / 2`` unit roundoffs. Entries that
    underflow add at most ``n_features * 2**-1074`` to a sum that is about 1
    or more. Twice ``n_features + 8`` unit roundoffs covers all of this and the
    3 roundings of the comparisons that use the bound.
    """
    return 2.0 * (n_features + 8) * _UNIT_ROUNDOFF


def _scaled_row_norms(rows):
    """Row maxima ``m`` and ``r`` with ``||row|| = m * r`` up to rounding.

    Scaling by the largest absolute entry first keeps the sum of squares in
    about [1, n_features], so it neither overflows (1e300-scale rows) nor
    underflows (1e-300-scale rows). Multiplying by the reciprocal of the row
    maximum is faster than dividing, and its extra rounding is in the error
    bound; where the reciprocal is not a normal float (row maxima below
    2**-1024 or above 2**1022) the kernel divides instead. One numba pass per
    row, without the temporaries of the whole array that numpy would need.
    """
    return scaled_row_norms(rows)


def _rows_to_scale(rows, max_norm):
    """Mask of the rows not certainly inside the ball, with their norms.

    A float comparison with the error bound certifies almost every row as
    inside. The others (outside, or too close to the sphere for rounding to
    decide, such as rows normalised to exactly ``max_norm``) are all scaled:
    a row on the sphere moves inwards by a relative few ``1e-16``, which costs
    nothing, where deciding it exactly would cost a rational-arithmetic pass
    per row. Also returns the row maxima and scaled norms of
    :func:`_scaled_row_norms`.
    """
    error_bound = _norm_relative_error_bound(rows.shape[1])
    row_max, scaled_norm = _scaled_row_norms(rows)
    nonzero = row_max > 0
    with np.errstate(divide="ignore", over="ignore"):
        allowed = max_norm / np.where(nonzero, row_max, 1.0)
    certainly_inside = ~nonzero | (scaled_norm * (1.0 + error_bound) <= allowed)
    return ~certainly_inside, row_max, scaled_norm


def _clip_rows_inplace(rows, max_norm):
    to_scale, row_max, scaled_norm = _rows_to_scale(rows, max_norm)
    if not np.any(to_scale):
        return rows
    error_bound = _norm_relative_error_bound(rows.shape[1])
    every_row = bool(to_scale.all())
    if not every_row:
        row_max, scaled_norm = row_max[to_scale], scaled_norm[to_scale]
    # Aim a few error bounds inside the ball so that the float check certifies
    # the result. Rows in the undecided band have norm above
    # max_norm * (1 - error_bound), so this always moves a row inwards. One
    # product per entry: the per-row factor's rounding is uniform over the
    # row, within the margin.
    shrink = 1.0 - 4.0 * error_bound
    target = (max_norm / scaled_norm) * shrink
    with np.errstate(under="ignore", over="ignore"):
        factor = target / row_max
    # Where the combined factor leaves the normal range, divide by the row
    # maximum first (two roundings per entry, the original scale kept).
    two_step = ~((factor > _FACTOR_RANGE[0]) & (factor < _FACTOR_RANGE[1]))
    if every_row and not two_step.any():
        # Normalised data (every row on the sphere): scale in place, no copy.
        rows *= factor[:, np.newaxis]
        clipped = rows
    else:
        every_row = False
        selected = rows[to_scale]
        clipped = selected * factor[:, np.newaxis]
        if two_step.any():
            clipped[two_step] = (
                selected[two_step] / row_max[two_step, np.newaxis]
            ) * target[two_step, np.newaxis]
    # With normal floats the margin certifies every clipped row (the scaling
    # adds two roundings per entry, far below the margin). Subnormal results
    # (a max_norm near 1e-308) round coarsely; shrink those rows further until
    # the check certifies them. Stepping every entry towards zero guarantees
    # progress.
    if max_norm <= _SUBNORMAL_NORM:
        still_outside = _rows_to_scale(clipped, max_norm)[0]
        while np.any(still_outside):
            shrink *= shrink
            clipped[still_outside] = np.nextafter(clipped[still_outside] * shrink, 0.0)
            still_outside[still_outside] = _rows_to_scale(
                clipped[still_outside], max_norm
            )[0]
    if not every_row:
        rows[to_scale] = clipped
    return rows


def clip_rows(X, max_norm):
    """Scale each row of ``X`` so that its Euclidean norm is at most ``max_norm``.

    Rows whose norm is at most ``max_norm`` by more than the rounding error
    are returned unchanged (zero rows stay zero); longer rows, and rows within
    rounding of the sphere, are scaled towards zero onto the sphere of radius
    ``max_norm``, less a relative margin of a few times ``n_features * 1e-16``. The bound holds in exact arithmetic for the returned
    floats, whatever their scale: clipping is what bounds each record's
    contribution, so a rounding error here would void the privacy guarantee.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        The rows (one per record). Converted to float64.
    max_norm : float
        The bound on each row's Euclidean norm, positive and finite.

    Returns
    -------
    X_clipped : ndarray of shape (n_samples, n_features)
        A clipped float64 copy of ``X``; the input is not modified.

    Raises
    ------
    ValueError
        If ``X`` is not a 2-D dense array of finite numbers, or ``max_norm`` is
        not a positive finite number.

    Examples
    --------
    >>> from skprivfact.mechanisms import clip_rows
    >>> clip_rows([[3.0, 4.0], [0.3, 0.4]], max_norm=1.0).round(6)
    array([[0.6, 0.8],
           [0.3, 0.4]])
    """
    max_norm = check_positive_bound(max_norm, "max_norm")
    rows = _as_float_array(X, "X")
    if rows.ndim != 2:
        if not np.all(np.isfinite(rows)):
            raise _non_finite_error("X")
        raise ValueError(
            f"X must be a 2-D array of shape (n_samples, n_features); got an "
            f"array of shape {rows.shape}."
        )
    if rows.size == 0:
        return rows
    return _clip_records_inplace(rows, max_norm, "X")


def clip_frobenius(stats, max_norm):
    """Scale each record's statistic so that its Frobenius norm is at most ``max_norm``.

    The Frobenius norm of ``stats[i]`` is the Euclidean norm of its entries,
    so this is :func:`clip_rows` on ``stats`` flattened per record, with the
    same exact guarantee.

    Parameters
    ----------
    stats : array-like of shape (n_records, ...)
        One statistic per record, for example per-document topic-word counts of
        shape (n_records, n_topics, n_words).
    max_norm : float
        The bound on each record's Frobenius norm, positive and finite.

    Returns
    -------
    stats_clipped : ndarray of the same shape as ``stats``
        A clipped float64 copy; the input is not modified.

    Raises
    ------
    ValueError
        If ``stats`` has no record axis (is 0-D), holds NaN or infinity, or
        ``max_norm`` is not a positive finite number.

    Examples
    --------
    >>> import numpy as np
    >>> from skprivfact.mechanisms import clip_frobenius
    >>> stats = np.array([[[3.0, 0.0], [0.0, 4.0]]])
    >>> np.linalg.norm(clip_frobenius(stats, max_norm=1.0)[0]) <= 1.0
    np.True_
    """
    max_norm = check_positive_bound(max_norm, "max_norm")
    values = _as_float_array(stats, "stats")
    if values.ndim < 1:
        if not np.all(np.isfinite(values)):
            raise _non_finite_error("stats")
        raise ValueError(
            "stats must have shape (n_records, ...), one statistic per record; "
            "got a 0-D array."
        )
    if values.size == 0:
        return values
    records = values.reshape(values.shape[0], -1)
    return _clip_records_inplace(records, max_norm, "stats").reshape(values.shape)


# Gaussian mechanism --------------------------------------------------------


def _check_noise_multiplier(noise_multiplier):
    return check_non_negative_number(noise_multiplier, "noise_multiplier")


def _check_sensitivities(sensitivities):
    try:
        values = np.array(sensitivities, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"sensitivities must be a sequence of positive numbers: {exc}"
        ) from exc
    if values.ndim != 1 or values.size == 0:
        raise ValueError(
            "sensitivities must be a non-empty 1-D sequence, one per block; got "
            f"shape {values.shape}."
        )
    if not np.all(np.isfinite(values) & (values > 0)):
        raise ValueError(
            f"sensitivities must be positive finite numbers; got {values.tolist()}."
        )
    return values


def _check_numpy_random_state(random_state):
    """The noise stream: None is fresh operating-system entropy.

    Not numpy's global RandomState (scikit-learn's reading of None): a
    ``np.random.seed`` anywhere in the process would replay that noise.
    """
    if random_state is None:
        return np.random.default_rng()
    if isinstance(random_state, np.random.Generator):
        return random_state
    if isinstance(random_state, random.Random):
        raise ValueError(
            "A random.Random instance is accepted only by the secure sampler "
            "(secure=True); use None, an int, a numpy RandomState or Generator."
        )
    return check_random_state(random_state)


def gaussian_noise_scales(sensitivities, noise_multiplier):
    """Noise std of each block released together by :func:`gaussian_mechanism`.

    For ``k`` blocks with L2 (Frobenius) sensitivities ``Delta_i``, block ``i``
    gets noise of std ``noise_multiplier * sqrt(k) * Delta_i``: see
    :func:`gaussian_mechanism` for why this makes the ``k`` blocks one Gaussian
    mechanism with noise multiplier ``noise_multiplier``.

    Parameters
    ----------
    sensitivities : array-like of shape (n_blocks,)
        The L2 (Frobenius) sensitivity of each block, positive and finite.
    noise_multiplier : float
        Noise std relative to the sensitivity of the stacked release,
        non-negative and finite.

    Returns
    -------
    scales : ndarray of shape (n_blocks,)
        The noise std of each block.

    Raises
    ------
    ValueError
        If a sensitivity is not positive and finite, or ``noise_multiplier`` is
        negative or not finite.

    Examples
    --------
    >>> from skprivfact.mechanisms import gaussian_noise_scales
    >>> gaussian_noise_scales([0.5, 0.25], noise_multiplier=2.0).round(4)
    array([1.4142, 0.7071])
    """
    sensitivities = _check_sensitivities(sensitivities)
    noise_multiplier = _check_noise_multiplier(noise_multiplier)
    return noise_multiplier * math.sqrt(sensitivities.size) * sensitivities


@functools.lru_cache(maxsize=16)
def _upper_triangle(n_features):
    """Flat indices of ``np.triu_indices(n_features)``, read-only, once per size."""
    upper_rows, upper_cols = np.triu_indices(n_features)
    flat = upper_rows * n_features + upper_cols
    flat.flags.writeable = False
    return flat


def symmetric_gaussian_noise(n_features, scale, *, random_state=None):
    """Symmetric Gaussian noise for releasing a symmetric matrix (Analyze-Gauss).

    The upper triangle, diagonal included, holds iid N(0, scale**2) draws and
    the lower triangle mirrors it (Dwork, Talwar, Thakurta and Zhang, "Analyze
    Gauss", 2014). A symmetric statistic is determined by its upper triangle,
    so this releases ``n_features * (n_features + 1) / 2`` numbers. The upper
    triangle of a per-record contribution has an L2 norm at most the
    contribution's Frobenius norm (the strict lower triangle is dropped), so the
    Frobenius sensitivity is a valid, conservative sensitivity for ``scale``.

    Parameters
    ----------
    n_features : int
        The number of rows (and columns) of the matrix, at least 1.
    scale : float
        The noise std of each upper-triangle entry, non-negative and finite.
    random_state : int, RandomState instance, Generator or None, default=None
        Source of the noise. None (the default) draws from fresh
        operating-system entropy, never numpy's global state; pass an int for
        reproducible output.

    Returns
    -------
    noise : ndarray of shape (n_features, n_features)
        An exactly symmetric noise matrix.

    Raises
    ------
    ValueError
        If ``n_features`` is not an integer >= 1 or ``scale`` is negative or not
        finite.

    Examples
    --------
    >>> import numpy as np
    >>> from skprivfact.mechanisms import symmetric_gaussian_noise
    >>> noise = symmetric_gaussian_noise(3, scale=1.0, random_state=0)
    >>> np.array_equal(noise, noise.T)
    True
    """
    if not (
        isinstance(n_features, Integral)
        and not isinstance(n_features, bool)
        and n_features >= 1
    ):
        raise ValueError(f"n_features must be an integer >= 1; got {n_features!r}.")
    scale = check_non_negative_number(scale, "scale")
    rng = _check_numpy_random_state(random_state)
    n_features = int(n_features)
    upper = _upper_triangle(n_features)
    noise = np.zeros(n_features * n_features)
    noise[upper] = rng.normal(0.0, scale, size=upper.size)
    noise = noise.reshape(n_features, n_features)
    # Mirror the strict upper triangle: adding to zeros is exact.
    return noise + np.triu(noise, 1).T


def gaussian_mechanism(
    blocks,
    sensitivities,
    noise_multiplier,
    *,
    symmetric=None,
    random_state=None,
    secure=False,
):
    """Release several statistics of the same records as one Gaussian mechanism.

    Each block (an already clipped and summed statistic) gets Gaussian noise of
    std ``noise_multiplier * sqrt(k) * sensitivities[i]`` for ``k`` blocks.

    This is ONE release: the caller's accountant takes one step with
    ``noise_multiplier``, not ``k``. Why: divide block ``i`` by its sensitivity
    ``Delta_i`` and stack the ``k`` results into one vector. Adding or removing a
    record changes each scaled block by at most 1 in L2 norm, so the stacked
    vector has L2 sensitivity ``sqrt(k)``; Gaussian noise of std
    ``noise_multiplier * sqrt(k)`` on it is the Gaussian mechanism with noise
    multiplier ``noise_multiplier``, and multiplying block ``i`` back by
    ``Delta_i`` is post-processing. Accounting the blocks as ``k`` separate
    releases of multiplier ``noise_multiplier`` each would under-report
    epsilon, since together they would need ``sqrt(k)`` times less noise.

    Parameters
    ----------
    blocks : sequence of array-like
        The statistics to release, each of any shape, with finite values.
    sensitivities : array-like of shape (n_blocks,)
        The L2 (Frobenius) sensitivity of each block under adding or removing
        one record, positive and finite. The caller guarantees it, by clipping.
    noise_multiplier : float
        Noise std relative to the sensitivity of the stacked release,
        non-negative and finite; this is the value the accountant is given.
    symmetric : sequence of bool, default=None
        Which blocks are symmetric matrices; those must be square and get the
        symmetric noise of :func:`symmetric_gaussian_noise`, with their
        Frobenius sensitivity. None means no symmetric block. A block marked
        symmetric is released as its symmetric part ``(A + A.T) / 2``.
    random_state : int, RandomState instance, Generator or None, default=None
        Source of the noise. None (the default) draws from fresh
        operating-system entropy, never numpy's global state (which a
        ``np.random.seed`` elsewhere would make replayable); pass an int for
        reproducible output. With ``secure=True``: None (the operating
        system's cryptographic randomness) or, for tests only, a
        ``random.Random``.
    secure : bool, default=False
        Draw floating-point-safe noise: each block is rounded to a grid of
        power-of-two step at most ``1e-3 * sensitivity / sqrt(size)`` and gets
        exact discrete Gaussian noise on that grid (:func:`discrete_gaussian`),
        of scale ``(1 + 1e-3)`` times the Gaussian's: the rounding moves the
        block's sensitivity by at most ``1e-3`` of itself, which that covers. Its
        Renyi DP is at most the continuous Gaussian's (Canonne, Kamath and
        Steinke, 2020, Theorems 4 and 14), so the RDP accountant's full-batch
        bound holds.

    Returns
    -------
    noisy_blocks : list of ndarray
        New float64 arrays, one per block, each of the block's shape; the inputs
        are not modified.

    Raises
    ------
    ValueError
        If the numbers of blocks, sensitivities and ``symmetric`` flags differ,
        a block holds NaN or infinity, a symmetric block is not a square
        matrix, or a sensitivity or ``noise_multiplier`` is out of range.

    Examples
    --------
    >>> import numpy as np
    >>> from skprivfact.mechanisms import gaussian_mechanism
    >>> mean_sum, second_moment = np.ones(2), np.eye(2)
    >>> noisy = gaussian_mechanism(
    ...     [mean_sum, second_moment], [0.5, 0.25], noise_multiplier=1.0,
    ...     symmetric=[False, True], random_state=0,
    ... )
    >>> [block.shape for block in noisy]
    [(2,), (2, 2)]
    """
    if isinstance(blocks, np.ndarray) or sp.issparse(blocks):
        raise ValueError(
            "blocks must be a sequence (list or tuple) of arrays, one per "
            "statistic; wrap a single array as [array]."
        )
    blocks = [
        _as_finite_float_array(block, f"blocks[{i}]") for i, block in enumerate(blocks)
    ]
    scales = gaussian_noise_scales(sensitivities, noise_multiplier)
    if len(blocks) != scales.size:
        raise ValueError(
            f"Got {len(blocks)} blocks but {scales.size} sensitivities; give one "
            "sensitivity per block."
        )
    if symmetric is None:
        symmetric = [False] * len(blocks)
    symmetric = list(symmetric)
    if len(symmetric) != len(blocks):
        raise ValueError(
            f"Got {len(blocks)} blocks but {len(symmetric)} symmetric flags; give "
            "one flag per block."
        )
    for i, (block, is_symmetric) in enumerate(zip(blocks, symmetric, strict=True)):
        if not isinstance(is_symmetric, (bool, np.bool_)):
            raise ValueError(f"symmetric[{i}] must be a bool; got {is_symmetric!r}.")
        if is_symmetric and (block.ndim != 2 or block.shape[0] != block.shape[1]):
            raise ValueError(
                f"blocks[{i}] is marked symmetric but has shape {block.shape}; a "
                "symmetric block must be a square matrix."
            )
    # The noise of a symmetric block is mirrored, so an asymmetric part
    # would pass through unnoised: release the symmetric part, (A + A.T) / 2,
    # whose sensitivity is at most A's (exactly A when A is symmetric).
    blocks = [
        (block + block.T) / 2.0 if is_symmetric else block
        for block, is_symmetric in zip(blocks, symmetric, strict=True)
    ]
    if secure:
        rng = _check_secure_random_state(random_state)
        sensitivities = _check_sensitivities(sensitivities)
        return [
            _secure_block_noise(
                block,
                float(delta),
                float(scale) * (1.0 + _SECURE_GRID_FRACTION),
                flag,
                rng,
            )
            for block, delta, scale, flag in zip(
                blocks, sensitivities, scales, symmetric, strict=True
            )
        ]
    rng = _check_numpy_random_state(random_state)
    noisy_blocks = []
    for block, scale, is_symmetric in zip(blocks, scales, symmetric, strict=True):
        if is_symmetric:
            noise = symmetric_gaussian_noise(
                block.shape[0], float(scale), random_state=rng
            )
        else:
            noise = rng.normal(0.0, scale, size=block.shape)
        noisy_blocks.append(block + noise)
    return noisy_blocks


def project_psd(matrix, floor=0.0):
    """Project a (noisy) matrix onto the symmetric matrices with eigenvalues >= floor.

    The matrix is symmetrized as ``(A + A.T) / 2`` and its eigenvalues below
    ``floor`` are raised to ``floor``; this is the nearest such matrix in
    Frobenius norm. Applied to a released statistic it is post-processing and
    costs no privacy. A symmetric input whose eigenvalues are all >= ``floor``
    is returned unchanged (as a copy). After flooring, the eigenvalues of the
    result are >= ``floor`` up to rounding of order ``1e-16 * ||matrix||``.

    Parameters
    ----------
    matrix : array-like of shape (n_features, n_features)
        The square matrix to project, with finite values.
    floor : float, default=0.0
        The smallest eigenvalue allowed, non-negative and finite.

    Returns
    -------
    projected : ndarray of shape (n_features, n_features)
        An exactly symmetric float64 matrix.

    Raises
    ------
    ValueError
        If ``matrix`` is not a finite square matrix or ``floor`` is negative or
        not finite.

    Examples
    --------
    >>> from skprivfact.mechanisms import project_psd
    >>> project_psd([[1.0, 2.0], [2.0, 1.0]]).round(6)
    array([[1.5, 1.5],
           [1.5, 1.5]])
    """
    values = _as_finite_float_array(matrix, "matrix")
    if values.ndim != 2 or values.shape[0] != values.shape[1] or values.size == 0:
        raise ValueError(
            f"matrix must be a non-empty square 2-D array; got shape {values.shape}."
        )
    floor = check_non_negative_number(floor, "floor")
    symmetric = (values + values.T) / 2.0
    # A Cholesky factorisation of the shifted matrix is several times cheaper
    # than the eigendecomposition and settles the common case of a matrix
    # already above the floor.
    try:
        np.linalg.cholesky(symmetric - floor * np.eye(symmetric.shape[0]))
    except np.linalg.LinAlgError:
        pass
    else:
        return symmetric
    eigenvalues, eigenvectors = np.linalg.eigh(symmetric)
    if eigenvalues.min() >= floor:
        return symmetric
    projected = (eigenvectors * np.maximum(eigenvalues, floor)) @ eigenvectors.T
    # The product is symmetric only up to rounding; make it exactly symmetric.
    return (projected + projected.T) / 2.0


# Two-sided geometric noise -------------------------------------------------


def _check_geometric_params(epsilon, sensitivity):
    """Validate the geometric mechanism's parameters; return epsilon / sensitivity."""
    check_privacy_params(epsilon=epsilon, sensitivity=sensitivity)
    noise_ratio = float(epsilon) / int(sensitivity)
    if noise_ratio < _MIN_NOISE_RATIO:
        raise ValueError(
            f"epsilon / sensitivity = {noise_ratio!r} is below {_MIN_NOISE_RATIO}: "
            "the noise (mean absolute value about sensitivity / epsilon) would "
            "overflow int64."
        )
    return noise_ratio


def _exact_fraction(epsilon):
    # Every float is a dyadic rational, so this is the exact value given.
    if isinstance(epsilon, (Rational, float)):
        return Fraction(epsilon)
    return Fraction(float(epsilon))


def _numpy_two_sided_geometric(noise_ratio, size, rng):
    # numpy's geometric counts trials up to the first success, on {1, 2, ...};
    # the difference of two cancels the shift to {0, 1, ...}.
    success_probability = -math.expm1(-noise_ratio)
    positive = rng.geometric(success_probability, size=size)
    negative = rng.geometric(success_probability, size=size)
    return np.asarray(positive, dtype=np.int64) - np.asarray(negative, dtype=np.int64)


def _exact_two_sided_geometric(numerator, denominator, n_draws, rng):
    """``n_draws`` exact draws of 2Geo(exp(-numerator / denominator)), as a list.

    Canonne, Kamath and Steinke (2020), "The Discrete Gaussian for Differential
    Privacy", Algorithms 1 and 2, in integer arithmetic only. With
    gamma = n / d and alpha = exp(-gamma):

    1. Bernoulli(exp(-g)) for rational g = a / b in [0, 1]: draw
       Bernoulli(g / K) for K = 1, 2, ... until one fails and return whether
       the failing K is odd. The loop stops at K = k with probability
       g**(k-1) / (k-1)! - g**k / k!, so P(odd) = sum_j (-g)**j / j! = exp(-g).
       Bernoulli(g / K) is ``randbelow(b * K) < a``.
    2. U uniform on {0, ..., d-1}, kept with probability exp(-U / d), and V
       the number of Bernoulli(exp(-1)) successes before the first failure
       (P(V = v) proportional to exp(-v)) give X = U + d * V with
       P(X = x) proportional to exp(-U / d) exp(-V) = exp(-x / d): a geometric
       with ratio exp(-1 / d).
    3. Y = X // n: P(Y = y) is the sum of exp(-x / d) over x in
       [n y, n y + n), proportional to exp(-n y / d) = alpha**y, a geometric on
       {0, 1, ...} with ratio alpha.
    4. A fair sign S, rejecting (Y = 0, S = -) and starting again: each
       t != 0 is kept with weight P(Y = |t|) / 2 and t = 0 with weight
       P(Y = 0) / 2, so P(tau = t) is proportional to alpha**|t|, which is
       (1 - alpha) / (1 + alpha) * alpha**|t| once normalised.

    Uniform integers come from the source's bytes, 64 bits at a time: the top
    ``k`` bits of a uniform word are uniform on {0, ..., 2**k - 1}, and
    rejecting values >= bound makes them uniform on {0, ..., bound - 1}.
    Reading thousands of words per call keeps the operating system's
    randomness from costing a system call per draw.
    """
    words = []
    randbytes = rng.randbytes
    words_per_refill = min(_SECURE_WORDS_PER_REFILL, 16 * n_draws + 16)

    def refill():
        words.extend(array("Q", randbytes(8 * words_per_refill)))

    def randbelow(bound):
        n_bits = (bound - 1).bit_length()
        while True:
            if n_bits <= 64:
                if not words:
                    refill()
                value = words.pop() >> (64 - n_bits)
            else:
                n_words = -(-n_bits // 64)
                value = 0
                for _ in range(n_words):
                    if not words:
                        refill()
                    value = (value << 64) | words.pop()
                value >>= 64 * n_words - n_bits
            if value < bound:
                return value

    def bernoulli_exp_minus_one():
        # Step 1 with g = 1: Bernoulli(1 / 1) always succeeds, so start at K = 2.
        k = 2
        while randbelow(k) == 0:
            k += 1
        return k & 1

    def bernoulli_exp_minus(u):
        # Step 1 with g = u / denominator < 1.
        k = 1
        while randbelow(denominator * k) < u:
            k += 1
        return k & 1

    draws = []
    append = draws.append
    while len(draws) < n_draws:
        if denominator == 1:
            u = 0  # accepted with probability exp(0) = 1
        else:
            while True:
                u = randbelow(denominator)
                if u == 0 or bernoulli_exp_minus(u):
                    break
        v = 0
        while bernoulli_exp_minus_one():
            v += 1
        magnitude = (u + denominator * v) // numerator
        if words:
            sign_word = words.pop()
        else:
            refill()
            sign_word = words.pop()
        if sign_word >> 63:
            if magnitude:
                append(-magnitude)
        else:
            append(magnitude)
    return draws


class _ExactBits:
    """Uniform integers and exact Bernoulli(exp(-gamma)) draws from a byte source.

    The building blocks of Canonne, Kamath and Steinke (2020), "The Discrete
    Gaussian for Differential Privacy", Algorithm 1, in integer arithmetic
    (see :func:`_exact_two_sided_geometric`, which inlines the same steps for
    speed).
    """

    def __init__(self, rng):
        self._randbytes = rng.randbytes
        self._words = []

    def randbelow(self, bound):
        n_bits = (bound - 1).bit_length()
        n_words = max(1, -(-n_bits // 64))
        while True:
            value = 0
            for _ in range(n_words):
                if not self._words:
                    self._words.extend(
                        array("Q", self._randbytes(8 * _SECURE_WORDS_PER_REFILL))
                    )
                value = (value << 64) | self._words.pop()
            value >>= 64 * n_words - n_bits
            if value < bound:
                return value

    def bernoulli_exp(self, gamma):
        """True with probability exp(-gamma), for a rational gamma >= 0."""
        while gamma > 1:
            # exp(-gamma) = exp(-1) * exp(-(gamma - 1)): both must succeed.
            if not self.bernoulli_exp(Fraction(1)):
                return False
            gamma -= 1
        numerator, denominator = gamma.numerator, gamma.denominator
        k = 1
        while self.randbelow(denominator * k) < numerator:
            k += 1
        return bool(k & 1)


def _exact_discrete_gaussian(sigma_squared, n_draws, rng):
    """``n_draws`` exact draws of the discrete Gaussian N_Z(0, sigma_squared).

    P(x) is proportional to exp(-x^2 / (2 sigma^2)) on the integers, for a
    rational ``sigma_squared`` (Canonne, Kamath and Steinke, 2020, Algorithm
    3): a discrete Laplace proposal of scale ``t = floor(sigma) + 1``, kept
    with probability ``exp(-(|y| - sigma^2 / t)^2 / (2 sigma^2))``.
    """
    bits = _ExactBits(rng)
    t = math.isqrt(sigma_squared.numerator // sigma_squared.denominator) + 1
    shift = sigma_squared / t
    draws = []
    while len(draws) < n_draws:
        # Discrete Laplace of scale t: U uniform below t kept with
        # probability exp(-U / t), plus t times a geometric of ratio exp(-1).
        u = bits.randbelow(t)
        if not bits.bernoulli_exp(Fraction(u, t)):
            continue
        v = 0
        while bits.bernoulli_exp(Fraction(1)):
            v += 1
        magnitude = u + t * v
        negative = bits.randbelow(2)
        if negative and magnitude == 0:
            continue
        if bits.bernoulli_exp((magnitude - shift) ** 2 / (2 * sigma_squared)):
            draws.append(-magnitude if negative else magnitude)
    return draws


def discrete_gaussian(sigma, size=None, *, random_state=None):
    """Exact draws of the discrete Gaussian on the integers, from secure randomness.

    P(x) is proportional to ``exp(-x**2 / (2 sigma**2))`` for every integer
    ``x``, with ``sigma`` taken as the exact rational value of the float
    given. Integer arithmetic only (Canonne, Kamath and Steinke, 2020), so no
    floating-point artefact (Mironov, 2012) can reveal the value the noise is
    added to. Pure Python, much slower than numpy's sampler.

    Parameters
    ----------
    sigma : float
        The scale, positive and finite.
    size : int or tuple of int, default=None
        Output shape; None gives a 0-D array.
    random_state : random.Random or None, default=None
        None (``secrets.SystemRandom``, the operating system's cryptographic
        randomness) or, for reproducible tests only, a ``random.Random``.

    Returns
    -------
    draws : ndarray of int64
        Python integers beyond int64 cannot occur below ``sigma = 1e15``.

    Examples
    --------
    >>> import random
    >>> from skprivfact.mechanisms import discrete_gaussian
    >>> discrete_gaussian(3.0, size=4, random_state=random.Random(0)).shape
    (4,)
    """
    sigma = check_positive_bound(sigma, "sigma")
    if sigma > 1e15:
        raise ValueError(f"sigma must be at most 1e15 (int64 draws); got {sigma!r}.")
    shape = _check_size(size)
    rng = _check_secure_random_state(random_state)
    draws = _exact_discrete_gaussian(Fraction(sigma) ** 2, math.prod(shape), rng)
    return np.array(draws, dtype=np.int64).reshape(shape)


def _secure_block_noise(block, sensitivity, scale, is_symmetric, rng):
    """Round a block to a grid of power-of-two step and add discrete Gaussian noise.

    The grid step is at most ``_SECURE_GRID_FRACTION * sensitivity /
    sqrt(size)``: rounding moves a block by at most ``step * sqrt(size)`` in
    L2 norm, so two neighbours' rounded blocks differ by at most their
    distance plus ``_SECURE_GRID_FRACTION * sensitivity``, which the caller
    covers by raising the noise scale by that fraction. The output is ``step *
    (rounded integers + noise)``, exact in float64 (a power of two times an
    integer below 2**53).
    """
    step = 2.0 ** math.floor(
        math.log2(_SECURE_GRID_FRACTION * sensitivity / math.sqrt(max(block.size, 1)))
    )
    grid = np.rint(block / step)
    if np.abs(grid).max(initial=0) >= 2**52 or scale / step >= 1e15:
        raise ValueError(
            "A statistic or its noise is too large for the secure grid (2**52 "
            "steps); lower its bound or use secure=False."
        )
    if is_symmetric:
        n = block.shape[0]
        upper = np.triu_indices(n)
        noise = np.zeros(block.shape, dtype=np.int64)
        noise[upper] = discrete_gaussian(scale / step, upper[0].size, random_state=rng)
        noise[upper[1], upper[0]] = noise[upper]
    else:
        noise = discrete_gaussian(scale / step, block.shape, random_state=rng)
    return step * (grid + noise)


def _check_secure_random_state(random_state):
    if random_state is None:
        return secrets.SystemRandom()
    if isinstance(random_state, random.Random):
        return random_state
    raise ValueError(
        "With secure=True, random_state must be None (the operating system's "
        "cryptographic randomness) or, for reproducible tests only, a "
        f"random.Random instance; got {random_state!r}."
    )


def _check_size(size):
    if size is None:
        return ()
    shape = (size,) if isinstance(size, Integral) else tuple(size)
    if not all(
        isinstance(n, Integral) and not isinstance(n, bool) and n >= 0 for n in shape
    ):
        raise ValueError(
            f"size must be None, a non-negative int or a tuple of them; got {size!r}."
        )
    return tuple(int(n) for n in shape)


def two_sided_geometric(
    epsilon, sensitivity=1, size=None, *, secure=False, random_state=None
):
    """Draw two-sided geometric noise, the noise of the geometric mechanism.

    P(tau = t) = (1 - alpha) / (1 + alpha) * alpha**|t| for every integer t,
    with alpha = exp(-epsilon / sensitivity). Adding it to an integer is
    (sensitivity, epsilon)-limited-precision local privacy: for inputs at L1
    distance at most ``sensitivity`` the output probabilities differ by at most
    a factor e**epsilon.

    The default sampler is numpy's: tau = G1 - G2 with G1, G2 iid geometric
    on {0, 1, ...} with success probability 1 - alpha. Its floating-point
    arithmetic makes the law only approximately 2Geo(alpha) (Mironov 2012
    showed how floating-point noise can break differential privacy), so
    ``secure=True`` samples exactly instead: epsilon / sensitivity is taken as
    the exact rational value of the float ``epsilon`` divided by
    ``sensitivity``, and the Canonne-Kamath-Steinke (2020) construction turns
    uniform random integers into draws with integer arithmetic only, from the
    operating system's cryptographic randomness. The secure sampler is pure
    Python, much slower than numpy's. Its running time grows with the
    magnitude of the noise drawn, so the time taken by a single draw can leak
    the noise (and, with the output, the input): draw noise for many entries at
    once, as :class:`~skprivfact.GeometricPrivatizer` does, and do not expose
    per-entry timings.

    Parameters
    ----------
    epsilon : float
        The privacy parameter, positive and finite.
    sensitivity : int, default=1
        The L1 distance ``N`` the guarantee covers, an integer >= 1.
    size : int or tuple of int, default=None
        Output shape; None gives a 0-D array (one draw).
    secure : bool, default=False
        Whether to use the exact integer sampler and cryptographic randomness.
    random_state : int, RandomState instance, Generator, random.Random or \
            None, default=None
        Source of the noise. With ``secure=False``: None (fresh
        operating-system entropy, never numpy's global state, which a
        ``np.random.seed`` elsewhere would make replayable), an int, a numpy
        ``RandomState`` or ``Generator``. With
        ``secure=True``: None (the default, ``secrets.SystemRandom``) or a
        ``random.Random`` instance, which is for reproducible tests only: the
        Mersenne Twister is predictable and gives no privacy.

    Returns
    -------
    noise : ndarray of dtype int64 and shape ``size``
        The draws.

    Raises
    ------
    ValueError
        If ``epsilon`` is not positive and finite, ``sensitivity`` is not an
        integer >= 1, epsilon / sensitivity is below 1e-12 (noise beyond int64),
        ``size`` is invalid, or ``random_state`` does not suit ``secure``.

    Examples
    --------
    >>> import random
    >>> from skprivfact.mechanisms import two_sided_geometric
    >>> two_sided_geometric(1.0, size=5, random_state=0).dtype
    dtype('int64')
    >>> two_sided_geometric(1.0, size=(2, 3), secure=True).shape
    (2, 3)
    >>> draws = two_sided_geometric(
    ...     1.0, size=4, secure=True, random_state=random.Random(0)  # tests only
    ... )
    """
    noise_ratio = _check_geometric_params(epsilon, sensitivity)
    shape = _check_size(size)
    if not isinstance(secure, (bool, np.bool_)):
        raise ValueError(f"secure must be a bool; got {secure!r}.")
    if not secure:
        rng = _check_numpy_random_state(random_state)
        return _numpy_two_sided_geometric(noise_ratio, shape, rng)
    rng = _check_secure_random_state(random_state)
    exact_ratio = _exact_fraction(epsilon) / int(sensitivity)
    draws = _exact_two_sided_geometric(
        exact_ratio.numerator, exact_ratio.denominator, math.prod(shape), rng
    )
    return np.array(draws, dtype=np.int64).reshape(shape)
