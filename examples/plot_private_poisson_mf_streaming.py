"""
==========================================================
Privatized counts beyond memory: blocks of rows and Dask
==========================================================

Local privacy makes a count matrix dense: every entry, zeros included,
carries noise, so the memory of a fit grows with rows x columns rather than
with the non-zeros. :class:`~skprivfact.PrivatePoissonMF` keeps
the noisy counts in the smallest integer type that holds them (int16 for
nearly all privatized counts) and sweeps over blocks of rows, so that a fit
needs little memory beyond that compact input. This example shows the two
ways to go further:

* :meth:`~skprivfact.PrivatePoissonMF.partial_fit` folds in a
  stream of privatized rows block by block, keeping none of them;
* a Dask array chunked by rows is fitted on a ``dask.distributed`` cluster
  (here a local one, when Dask is installed), with the same result as the
  in-memory fit.
"""

# %%
# A stream of privatized rows
# ---------------------------
#
# Rows drawn from a rank-5 Poisson factorization and privatized at
# epsilon/N = 1 arrive in blocks of 250; the last 250 rows are held out. The
# model's score on them is the Poisson log-likelihood of their *clean*
# counts at the rates it infers from their release.

import matplotlib.pyplot as plt
import numpy as np

from skprivfact.datasets import make_poisson_factorization
from skprivfact.poisson_mf import PrivatePoissonMF, heldout_loglik

X, X_noisy, _, _ = make_poisson_factorization(
    2250, 100, 5, factor_shape=0.4, epsilon=1.0, random_state=0
)
X_noisy = X_noisy.astype(np.int16)  # exact: |noisy count| < 2**15
print(
    f"int16: {X_noisy.nbytes / 1e6:.1f} MB; as float64 it would take "
    f"{X_noisy.size * 8 / 1e6:.1f} MB"
)
train, test = X_noisy[:2000], X_noisy[2000:]

online = PrivatePoissonMF(5, epsilon=1.0, random_state=0)
scores = []
for start in range(0, 2000, 250):
    online.partial_fit(train[start : start + 250])
    scores.append(heldout_loglik(online, test, X[2000:]))

batch = PrivatePoissonMF(5, epsilon=1.0, random_state=0).fit(train)
batch_score = heldout_loglik(batch, test, X[2000:])

fig, ax = plt.subplots(figsize=(6, 3.5))
ax.plot(np.arange(1, 9) * 250, scores, "o-", label="partial_fit, block by block")
ax.axhline(batch_score, color="k", linestyle="--", label="fit on all rows at once")
ax.set_xlabel("rows seen")
ax.set_ylabel("held-out clean log-likelihood per entry")
ax.legend()
fig.tight_layout()

# %%
# Each block improves the components; after one pass the online model is
# close to the batch fit, which needed every row at once.
print(
    f"after the first block {scores[0]:.4f}, after all {scores[-1]:.4f}, "
    f"batch {batch_score:.4f}"
)

# %%
# The same fit on a Dask cluster
# ------------------------------
#
# With ``pip install skprivfact[dask]``, a Dask array chunked by rows is
# fitted on the current ``dask.distributed`` client: each chunk is kept,
# compacted, on a worker; each sweep runs one task per chunk and the driver
# adds the chunks' column statistics in chunk order. Chunks of the size of
# the in-memory blocks give the in-memory result bit for bit; other chunks
# give it to rounding. A Dask array is not searched for "auto" prior shapes
# (that would gather rows across the workers): give the shapes, here 0.1. A
# local cluster of two workers stands in for a real one here (threads, so
# that the example starts fast).

try:
    import dask.array as da
    from distributed import Client, LocalCluster
except ImportError:
    da = None
    print("Dask is not installed: pip install skprivfact[dask]")

if da is not None:
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None
        ) as cluster,
        Client(cluster),
    ):
        kwargs = {"epsilon": 1.0, "max_iter": 30, "tol": 0, "random_state": 0,
                  "factor_prior_shape": 0.1, "component_prior_shape": 0.1}
        in_memory = PrivatePoissonMF(5, **kwargs).fit(train)
        distributed = PrivatePoissonMF(5, **kwargs).fit(
            da.from_array(train, chunks=(500, 100))
        )
    difference = np.abs(distributed.components_ - in_memory.components_).max()
    print(
        f"largest difference of the components: {difference:.2e} "
        f"(largest component value {in_memory.components_.max():.2f})"
    )
