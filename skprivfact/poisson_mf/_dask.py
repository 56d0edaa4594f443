"""Row blocks of a Dask array, swept on a ``dask.distributed`` cluster.

The chunks of rows are validated, compacted (``compact_counts``) and kept on
the workers; each sweep sends every task its block's rows of the row factors
and one broadcast copy of what the blocks share of q(phi), and gets back the
block's row sums (rows x K) and column sums (K x columns). The driver adds
the column sums in block order, so a fit whose chunks are the in-memory row
blocks gives the in-memory result bit for bit, and any other chunking the
same result to rounding. Dask is optional: nothing here is imported unless
a Dask array is given.
"""

import numpy as np
from threadpoolctl import threadpool_limits

from ._blocks import compact_counts


def is_dask_array(X):
    """Whether ``X`` is a ``dask.array.Array`` (without importing Dask)."""
    module = type(X).__module__ or ""
    return module.startswith("dask.") and type(X).__name__ == "Array"


def _compact_chunk(block):
    """Validate one chunk of noisy counts and return its compact copy."""
    block = np.asarray(block)
    if block.dtype.kind not in "iuf":
        raise ValueError(
            f"X must hold integer (noisy) counts; got dtype {block.dtype}."
        )
    if block.dtype.kind == "f":
        if not np.isfinite(block).all():
            raise ValueError("Input X contains NaN or infinity.")
        if np.any(block != np.floor(block)):
            raise ValueError(
                "X must hold integer (noisy) counts; found a non-integer value. Round "
                "or bin the data before privatizing it."
            )
    return compact_counts(block)


def _run_block(func, block, *rows_and_shared):
    # the last argument is the tuple every block shares
    *rows, shared = rows_and_shared
    with threadpool_limits(limits=1, user_api="blas"):
        return func(block, *rows, *shared, workspace=None)


def _payload_bytes(value):
    if isinstance(value, np.ndarray):
        return value.nbytes
    if isinstance(value, (tuple, list)):
        return sum(_payload_bytes(item) for item in value)
    return 8


def default_client():
    """The current ``dask.distributed`` client; a clear error without one."""
    try:
        from distributed import get_client
    except ImportError as error:  # pragma: no cover - dask without distributed
        raise ImportError(
            "Fitting a Dask array needs dask.distributed: pip install "
            "'skprivfact[dask]'."
        ) from error
    try:
        return get_client()
    except ValueError as error:
        raise ValueError(
            "Fitting a Dask array needs a dask.distributed Client (for example "
            "Client(LocalCluster(n_workers=2))); none is active."
        ) from error


class DaskRowBlocks:
    """The row chunks of a 2-d Dask array, compacted and held on the workers.

    ``map`` has the meaning of ``InMemoryRowBlocks.map``: one task per
    chunk, results yielded in chunk order. ``bytes_sent`` and
    ``bytes_received`` count the arrays that cross between the driver and
    the workers (the payload, without the protocol's overhead), summed over
    the calls of ``map``; ``n_maps`` counts the calls.
    """

    def __init__(self, X, client=None):
        import dask

        self.client = default_client() if client is None else client
        if X.ndim != 2:
            raise ValueError(f"Expected a 2-d Dask array; got {X.ndim} dimensions.")
        if len(X.chunks[1]) > 1:
            # a task needs whole rows
            X = X.rechunk({1: -1})
        self.shape = tuple(int(n) for n in X.shape)
        bounds, start = [], 0
        for size in X.chunks[0]:
            bounds.append((start, start + size))
            start += size
        self.block_bounds = bounds
        self.n_blocks = len(bounds)
        chunks = X.to_delayed().ravel()
        self.blocks = self.client.compute(
            [dask.delayed(_compact_chunk)(chunk) for chunk in chunks]
        )
        # raise a validation error now, not in the first sweep
        self.client.gather(self.client.map(lambda block: None, self.blocks))
        self.bytes_sent = 0
        self.bytes_received = 0
        self.n_maps = 0

    def map(self, func, row_arrays, *shared):
        shared_future = self.client.scatter([shared], broadcast=True, hash=False)[0]
        n_workers = max(len(self.client.scheduler_info()["workers"]), 1)
        self.bytes_sent += _payload_bytes(shared) * n_workers
        self.n_maps += 1
        futures = []
        for block, (start, stop) in zip(self.blocks, self.block_bounds):
            rows = [None if a is None else a[start:stop] for a in row_arrays]
            self.bytes_sent += _payload_bytes(rows)
            futures.append(
                self.client.submit(
                    _run_block, func, block, *rows, shared_future, pure=False
                )
            )
        for future in futures:
            result = future.result()
            self.bytes_received += _payload_bytes(result)
            yield result
        del shared_future

    def release(self):
        """Drop the compacted chunks held on the workers."""
        self.client.cancel(self.blocks)
        self.blocks = []
