"""One input gateway per kind of input, and one check for privacy parameters.

Every estimator validates its inputs through these functions, in ``fit``,
``partial_fit``, ``transform`` and ``score`` alike, so the same bad input gives
the same message everywhere.
"""

import math
import re
from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
from sklearn.utils import check_array
from sklearn.utils.validation import validate_data

__all__ = [
    "as_float64",
    "validate_input",
    "check_no_fit_params",
    "check_count_matrix",
    "check_noisy_count_matrix",
    "check_privacy_params",
    "check_positive_bound",
    "check_non_negative_number",
]

# Floats first: a list such as [[1.5]] must reach the integrality check as
# 1.5, not be truncated to 1 by a cast to int.
_COUNT_DTYPES = (np.float64, np.float32, np.int64, np.int32)
# float64 represents every integer up to 2**53 and no range beyond it; larger
# "counts" are not exact integers, and adding noise to them could overflow.
_MAX_ABS_COUNT = 2**53


# A value quoted by scikit-learn's or numpy's message about the input: the
# "array=..." line of a wrong number of dimensions, the array printed after
# "Complex data not supported", the text after "could not convert string to
# float:" (or "invalid literal for int() with base 10:").
# (A long array runs over several lines, up to scikit-learn's "Reshape your
# data" advice.)
_QUOTED_ARRAY = re.compile(r"^array=.*?(?=^Reshape|\Z)", re.MULTILINE | re.DOTALL)
_CONVERSION = re.compile(r"^(could not convert .+? to \w+|invalid literal for .+?): .*$")


def _without_values(message):
    """``message`` without the input values it quotes (None: it quotes none)."""
    first_line, _, rest = message.partition("\n")
    if first_line.startswith("Complex data not supported"):
        return "Complex data not supported."
    unquoted = _CONVERSION.sub(
        r"\1: a value is not a number (the value is not shown: it may be a "
        r"private record's).",
        first_line,
    )
    if rest:
        unquoted += "\n" + _QUOTED_ARRAY.sub("array=(not shown)\n", rest)
    return None if unquoted == message else unquoted


def _without_quoted_values(function, *args, **kwargs):
    """``function(*args, **kwargs)``; its input errors raised again without values."""
    try:
        return function(*args, **kwargs)
    except (TypeError, ValueError) as error:
        message = _without_values(str(error))
        if message is None:
            raise
        kind = TypeError if isinstance(error, TypeError) else ValueError
        # "from None": the original message, with the values, stays out of the
        # traceback too.
        raise kind(message) from None


def validate_input(estimator, *args, **kwargs):
    """scikit-learn's ``validate_data``, its errors without the values they quote.

    A private fit's error about its input must not name the offending value
    (it may be a record's): scikit-learn prints a 1-D input in full and numpy
    the string it could not convert. Those errors are raised again, of the
    same kind and with the same text up to the values.
    """
    return _without_quoted_values(validate_data, estimator, *args, **kwargs)


def as_float64(values, input_name):
    """``values`` as a float64 array; an error quotes none of them.

    For inputs that ``validate_data`` leaves as they are (a target of strings
    with ``y_numeric=True``).
    """
    try:
        return np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(
            f"{input_name} holds a value that is not a number (the value is not "
            "shown: it may be a private record's)."
        ) from None


def _validate(X, estimator, reset, accept_sparse, dtype, input_name):
    kwargs = dict(
        accept_sparse=accept_sparse,
        dtype=dtype,
        ensure_all_finite=True,
        ensure_2d=True,
    )
    if estimator is None:
        X = _without_quoted_values(check_array, X, input_name=input_name, **kwargs)
    else:
        X = validate_input(estimator, X, reset=reset, **kwargs)
    if sp.issparse(X) and not X.has_canonical_format:
        # A count split over duplicate entries (one entry per token), or
        # unsorted indices: merged and sorted, since a row's entries split in
        # two look smaller than they are to a clipping bound; on a copy, as
        # the caller's matrix may share its index arrays with X.
        X = X.copy()
        X.sum_duplicates()
    return X


def _stored_values(X):
    return X.data if sp.issparse(X) else np.asarray(X)


# Entries checked at a time: the checks' temporaries stay small next to a
# large matrix instead of adding a full-size copy of it.
_CHECK_CHUNK = 1 << 20


def _check_integral(values, input_name, what):
    flat = np.ravel(values, order="K")
    for start in range(0, flat.size, _CHECK_CHUNK):
        chunk = flat[start:start + _CHECK_CHUNK]
        # from the extremes: no temporary the size of the chunk
        largest = max(abs(chunk.min().item()), abs(chunk.max().item()))
        if largest >= _MAX_ABS_COUNT:
            raise ValueError(
                f"{input_name} holds a count of 2**53 = {_MAX_ABS_COUNT} or more "
                "in absolute value, beyond which float64 does not represent every "
                "integer; counts must be below it."
            )
    if values.dtype.kind != "f":
        return
    for start in range(0, flat.size, _CHECK_CHUNK):
        chunk = flat[start:start + _CHECK_CHUNK]
        fractional = chunk != np.floor(chunk)
        if np.any(fractional):
            # The value is not named: it may be a private record's.
            raise ValueError(
                f"{input_name} must hold {what}; found a non-integer value. "
                "Round or bin the data first."
            )


def check_count_matrix(
    X,
    *,
    estimator=None,
    reset=True,
    accept_sparse=("csr", "csc", "coo"),
    dtype=_COUNT_DTYPES,
    input_name="X",
):
    """Validate a matrix of raw (non-negative integer) counts.

    Parameters
    ----------
    X : {array-like, sparse matrix} of shape (n_samples, n_features)
        The counts. Float arrays are accepted when every value is integral.
    estimator : estimator instance, default=None
        When given, :func:`sklearn.utils.validation.validate_data` is used, so
        ``n_features_in_`` is set (``reset=True``) or checked (``reset=False``).
    reset : bool, default=True
        Passed to ``validate_data``; ignored when ``estimator`` is None.
    accept_sparse : str, tuple of str or False, default=("csr", "csc", "coo")
        Sparse formats accepted; others are converted to the first one.
    dtype : type or tuple of types, default=(float64, float32, int64, int32)
        Accepted dtypes; other inputs are converted to the first one.
    input_name : str, default="X"
        Name used in error messages.

    Returns
    -------
    X : {ndarray, sparse matrix} of shape (n_samples, n_features)
        The validated counts.

    Raises
    ------
    ValueError
        If ``X`` is empty, not 2-D, holds NaN or infinity, a negative value, a
        non-integer value or a value of 2**53 or more.
    """
    X = _validate(X, estimator, reset, accept_sparse, dtype, input_name)
    values = _stored_values(X)
    if values.size and values.min() < 0:
        raise ValueError(
            f"Negative values in data passed to {input_name}: it must hold "
            "non-negative counts. Counts that already carry privacy noise (and "
            "so negative values) are modelled by PrivatePoissonMF with `epsilon` "
            "set."
        )
    _check_integral(values, input_name, "integer counts")
    return X


def check_noisy_count_matrix(
    X,
    *,
    estimator=None,
    reset=True,
    accept_sparse=("csr", "csc", "coo"),
    dtype=_COUNT_DTYPES,
    input_name="X",
):
    """Validate a matrix of privatized counts (integers, possibly negative).

    Parameters
    ----------
    X : {array-like, sparse matrix} of shape (n_samples, n_features)
        The noisy counts, for example the output of
        :class:`~skprivfact.GeometricPrivatizer`.
    estimator : estimator instance, default=None
        When given, :func:`sklearn.utils.validation.validate_data` is used.
    reset : bool, default=True
        Passed to ``validate_data``; ignored when ``estimator`` is None.
    accept_sparse : str, tuple of str or False, default=("csr", "csc", "coo")
        Sparse formats accepted.
    dtype : type or tuple of types, default=(float64, float32, int64, int32)
        Accepted dtypes; other inputs are converted to the first one.
    input_name : str, default="X"
        Name used in error messages.

    Returns
    -------
    X : {ndarray, sparse matrix} of shape (n_samples, n_features)
        The validated noisy counts.

    Raises
    ------
    ValueError
        If ``X`` is empty, not 2-D, holds NaN or infinity, a non-integer
        value or a value of absolute value 2**53 or more.
    """
    X = _validate(X, estimator, reset, accept_sparse, dtype, input_name)
    _check_integral(_stored_values(X), input_name, "integer (noisy) counts")
    return X


def _is_real(value):
    return isinstance(value, Real) and not isinstance(value, bool)


def check_privacy_params(
    epsilon=None, delta=None, sensitivity=None, *, allow_infinite_epsilon=False
):
    """Check privacy parameters; the ones left as None are not checked.

    Parameters
    ----------
    epsilon : float, default=None
        Must be positive and finite; ``float("inf")`` is accepted only when
        ``allow_infinite_epsilon`` is True (the documented "no privacy" value
        of the central-DP estimators).
    delta : float, default=None
        Must lie in the open interval (0, 1).
    sensitivity : int, default=None
        Must be an integer >= 1 (the L1 distance ``N`` of limited-precision
        local privacy).
    allow_infinite_epsilon : bool, default=False
        Whether ``epsilon=inf`` is a valid value.

    Raises
    ------
    ValueError
        Naming the parameter and the value that is out of range.
    """
    if epsilon is not None:
        ok = _is_real(epsilon) and epsilon > 0 and not math.isnan(epsilon)
        if ok and math.isinf(epsilon) and not allow_infinite_epsilon:
            raise ValueError(
                "epsilon must be a positive finite number; got inf, which would "
                "release the data without noise."
            )
        if not ok:
            raise ValueError(f"epsilon must be a positive number; got {epsilon!r}.")
    if delta is not None:
        if not (_is_real(delta) and 0 < delta < 1):
            raise ValueError(
                f"delta must lie in the open interval (0, 1); got {delta!r}."
            )
    if sensitivity is not None:
        if not (
            isinstance(sensitivity, Integral)
            and not isinstance(sensitivity, bool)
            and sensitivity >= 1
        ):
            raise ValueError(f"sensitivity must be an integer >= 1; got {sensitivity!r}.")


def check_positive_bound(value, name):
    """Check that a data bound (a norm, a range width) is positive and finite.

    Parameters
    ----------
    value : float
        The bound.
    name : str
        Its parameter name, used in the message.

    Returns
    -------
    value : float
        The bound as a float.

    Raises
    ------
    ValueError
        If ``value`` is not a positive finite number.
    """
    if not (_is_real(value) and math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a positive finite number; got {value!r}.")
    return float(value)


def check_non_negative_number(value, name, *, allow_inf=False):
    """Check that a scalar parameter (a noise scale, a floor) is a number >= 0.

    Parameters
    ----------
    value : float
        The value to check.
    name : str
        Its parameter name, used in the message.
    allow_inf : bool, default=False
        Whether ``float("inf")`` is accepted.

    Returns
    -------
    value : float
        The value as a float.

    Raises
    ------
    ValueError
        If ``value`` is not a real number >= 0 (NaN and, unless allowed,
        infinity are rejected).
    """
    if not (
        _is_real(value)
        and value >= 0
        and (allow_inf or math.isfinite(value))
    ):
        what = "a number >= 0" if allow_inf else "a non-negative finite number"
        raise ValueError(f"{name} must be {what}; got {value!r}.")
    return float(value)


def check_no_fit_params(estimator, fit_params, sample_weight_reason):
    """Refuse keyword arguments of ``fit`` with a message that says why.

    For estimators whose ``fit`` takes ``**fit_params`` only to answer
    ``sample_weight`` with the reason it has no meaning for them (rather
    than Python's bare "unexpected keyword argument").

    Parameters
    ----------
    estimator : estimator instance
        Named in the message.
    fit_params : dict
        The keyword arguments ``fit`` received.
    sample_weight_reason : str
        Why the estimator has no use for sample weights.

    Raises
    ------
    TypeError
        If ``fit_params`` is not empty.
    """
    if not fit_params:
        return
    name = type(estimator).__name__
    if "sample_weight" in fit_params:
        raise TypeError(f"{name}.fit does not take sample_weight: {sample_weight_reason}")
    raise TypeError(
        f"{name}.fit got unexpected keyword argument(s) {sorted(fit_params)}"
    )
