"""
=================================
Privacy accounting with Renyi DP
=================================

A central-DP fit repeats one release many times: each iteration draws a
Poisson-subsampled batch (every record kept with probability ``q``), sums the
clipped per-record contributions and adds Gaussian noise whose standard
deviation is ``noise_multiplier`` times the sum's sensitivity. The
:class:`~skprivfact.accounting.RDPAccountant` adds up the Renyi DP of these
steps and converts the total to an (epsilon, delta) guarantee.

This example shows how epsilon grows with the number of steps for a few noise
multipliers, then goes the other way: it calibrates the noise multiplier for a
target epsilon with
:func:`~skprivfact.accounting.calibrate_noise_multiplier` and checks the
round trip.
"""

# %%
# Epsilon spent against the number of steps
# -----------------------------------------
#
# The sampling rate is ``q = 0.01`` (a batch of 1% of the records per step)
# and ``delta = 1e-5``. RDP composes by addition, so the RDP of ``T`` steps is
# ``T`` times that of one step, at every order; the conversion to epsilon then
# picks the best order for each ``T``.

import matplotlib.pyplot as plt
import numpy as np

from skprivfact.accounting import (
    DEFAULT_ORDERS,
    RDPAccountant,
    calibrate_noise_multiplier,
    compute_rdp,
    rdp_to_epsilon,
)

sample_rate = 0.01
delta = 1e-5
noise_multipliers = [0.8, 1.1, 1.5, 2.0]
steps_grid = np.unique(np.geomspace(1, 10_000, 40).astype(int))

fig, ax = plt.subplots(figsize=(6, 4))
for sigma in noise_multipliers:
    rdp_one_step = compute_rdp(sigma, sample_rate=sample_rate, steps=1)
    epsilons = [
        rdp_to_epsilon(DEFAULT_ORDERS, steps * rdp_one_step, delta)[0]
        for steps in steps_grid
    ]
    ax.plot(steps_grid, epsilons, label=f"noise multiplier {sigma}")
ax.set_xscale("log")
ax.set_yscale("log")
ax.set_xlabel("steps")
ax.set_ylabel(r"$\epsilon$ at $\delta = 10^{-5}$")
ax.set_title(f"Poisson-subsampled Gaussian, q = {sample_rate}")
ax.legend()
fig.tight_layout()

# %%
# The same numbers from an accountant
# -----------------------------------
#
# An estimator does not call :func:`~skprivfact.accounting.compute_rdp`
# itself: it records its steps in an accountant, which keeps the history (so
# that ``partial_fit`` can keep spending from it) and converts on demand.
# ``get_privacy_spent`` also returns the Renyi order at which the conversion
# was tightest.

accountant = RDPAccountant()
accountant.compose(1.1, sample_rate=sample_rate, steps=5_000)
accountant.compose(1.1, sample_rate=sample_rate, steps=5_000)
epsilon, order = accountant.get_privacy_spent(delta)
print(f"{accountant.steps} steps: epsilon = {epsilon:.3f} (best order {order:g})")
print("history:", accountant.history)

# %%
# Calibrating the noise for a target epsilon
# ------------------------------------------
#
# :func:`~skprivfact.accounting.calibrate_noise_multiplier` finds, by
# bisection, the smallest noise multiplier whose composed steps stay within a
# target epsilon. Composing that multiplier in a fresh accountant gives back
# an epsilon just below the target, and 0.1% less noise already exceeds it.

steps = 10_000
for target in [0.5, 1.0, 2.0, 4.0, 8.0]:
    sigma = calibrate_noise_multiplier(target, delta, sample_rate=sample_rate, steps=steps)
    spent = RDPAccountant().compose(sigma, sample_rate, steps).get_epsilon(delta)
    less_noise = RDPAccountant().compose(sigma / 1.001, sample_rate, steps)
    print(
        f"target {target:3.1f}: noise multiplier {sigma:.4f}, "
        f"epsilon spent {spent:.4f}, "
        f"with 0.1% less noise {less_noise.get_epsilon(delta):.4f}"
    )

# %%
# Epsilon as a function of the noise multiplier, for the same 10,000 steps:
# the calibrated multiplier is where the curve crosses the target.

target = 1.0
calibrated = calibrate_noise_multiplier(target, delta, sample_rate=sample_rate, steps=steps)
sigmas = np.linspace(0.6, 2.5 * calibrated, 60)
epsilons = [
    RDPAccountant().compose(s, sample_rate, steps).get_epsilon(delta) for s in sigmas
]

fig, ax = plt.subplots(figsize=(6, 4))
ax.plot(sigmas, epsilons, label=f"{steps} steps, q = {sample_rate}")
ax.axhline(target, color="gray", linestyle="--", label=rf"target $\epsilon$ = {target}")
ax.axvline(calibrated, color="C3", linestyle=":", label=f"calibrated: {calibrated:.3f}")
ax.set_yscale("log")
ax.set_xlabel("noise multiplier")
ax.set_ylabel(r"$\epsilon$ at $\delta = 10^{-5}$")
ax.legend()
fig.tight_layout()
plt.show()
