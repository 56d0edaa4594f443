"""Noisy count matrices held compactly and swept over in blocks of rows.

Local privacy makes the count matrix dense (every zero carries noise), so
the memory of a fit grows with rows x columns. The noisy counts are stored
in the smallest integer type that holds them exactly (two-sided geometric
noise at epsilon / N >= 0.1 almost never leaves int16), and every per-entry
quantity of a sweep is recomputed block by block from the factors, never
stored for the whole matrix. A source of row blocks is anything with
``shape``, ``n_blocks``, ``block_bounds`` and ``map``: the in-memory one
below (an array, or a ``numpy.memmap`` streamed from disk) and the Dask one
in ``_dask``.
"""

import numpy as np
import scipy.sparse as sp

# Entries per row block: the block's float32 buffers take 8 bytes an entry,
# 2 MiB here, far below the compact matrix of any problem worth blocking,
# and rows enough per block for the matrix products to run at full speed.
BLOCK_ENTRIES = 1 << 18

# Integer types tried in order for the compact copy.
_COMPACT_DTYPES = (np.int16, np.int32)


def rows_per_block(n_cols, block_entries=None):
    """Rows per block for ``n_cols`` columns (at least one)."""
    block_entries = BLOCK_ENTRIES if block_entries is None else block_entries
    return max(1, block_entries // max(n_cols, 1))


def _row_chunks(n_rows, n_cols):
    step = rows_per_block(n_cols)
    return [(start, min(start + step, n_rows)) for start in range(0, n_rows, step)]


def compact_dtype(low, high):
    """Smallest of int16 and int32 holding every integer in [low, high];
    float64 (exact up to 2**53) beyond int32."""
    for dtype in _COMPACT_DTYPES:
        info = np.iinfo(dtype)
        if info.min <= low and high <= info.max:
            return np.dtype(dtype)
    return np.dtype(np.float64)


def _block_range(block):
    if sp.issparse(block):
        values = block.data
        if values.size < block.shape[0] * block.shape[1]:
            # the implicit zeros
            return min(values.min(initial=0), 0), max(values.max(initial=0), 0)
        return values.min(), values.max()
    return block.min(), block.max()


def compact_counts(X):
    """The integer matrix ``X`` (validated: integral values) as a C-contiguous
    array of the smallest exact dtype, converted a block of rows at a time.

    ``X`` is returned as is when it already has that dtype and layout; sparse
    input is densified block by block (noisy counts are dense by nature).
    """
    n_rows, n_cols = X.shape
    if sp.issparse(X):
        X = X.tocsr()
    chunks = _row_chunks(n_rows, n_cols)
    low, high = 0, 0
    for start, stop in chunks:
        block_low, block_high = _block_range(X[start:stop])
        low, high = min(low, block_low), max(high, block_high)
    dtype = compact_dtype(low, high)
    if not sp.issparse(X) and X.dtype == dtype and X.flags.c_contiguous:
        return X
    out = np.empty((n_rows, n_cols), dtype=dtype)
    for start, stop in chunks:
        block = X[start:stop]
        out[start:stop] = block.toarray() if sp.issparse(block) else block
    return out


class InMemoryRowBlocks:
    """Row blocks of one array (in memory, or a memmap read block by block).

    ``map(func, row_arrays, *shared)`` calls ``func(block, *row_slices,
    *shared, workspace=...)`` block after block and yields the results in
    order (lazily: the caller reduces each before the next is computed); ``row_arrays`` are sliced with the block's rows, ``workspace`` is a
    dict the calls share (buffers reused from block to block and sweep to
    sweep: fresh arrays cost a page fault per page every time).
    """

    def __init__(self, X, block_rows=None):
        self.X = X
        self.shape = X.shape
        step = rows_per_block(X.shape[1]) if block_rows is None else block_rows
        self.block_bounds = [
            (start, min(start + step, X.shape[0]))
            for start in range(0, X.shape[0], step)
        ]
        self.n_blocks = len(self.block_bounds)
        self.workspace = {}

    def map(self, func, row_arrays, *shared):
        for start, stop in self.block_bounds:
            rows = [None if a is None else a[start:stop] for a in row_arrays]
            # asarray: a memmap's block as a plain array view (numba's type)
            block = np.asarray(self.X[start:stop])
            yield func(block, *rows, *shared, workspace=self.workspace)


class RowSubsetBlocks(InMemoryRowBlocks):
    """Row blocks of the rows ``rows`` (sorted indices) of an array, each
    block gathered when it is used: a subset of the rows without a copy of
    them. Indexing with a slice of the subset's rows gathers those rows."""

    def __init__(self, X, rows, block_rows=None):
        super().__init__(_RowsView(X, np.asarray(rows)), block_rows)

    def __getitem__(self, key):
        return self.X[key]


class _RowsView:
    """``X[rows]`` of shape (len(rows), n_cols), each slice gathered on use."""

    def __init__(self, X, rows):
        self.base, self.rows = X, rows
        self.shape = (len(rows), X.shape[1])

    def __getitem__(self, key):
        return self.base[self.rows[key]]
