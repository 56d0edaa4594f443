"""
===================================================
Private sigmoid belief network on binarized digits
===================================================

:class:`~skprivfact.DPSigmoidBeliefNet` is a one-hidden-layer sigmoid
belief network for binary data, fitted by variational Bayes with
Polya-Gamma augmentation, and made (epsilon, delta)-differentially private by
releasing, at each iteration, its three expected sufficient statistics (one
stack of matrices, one of vectors, and the count of active hidden units)
together as one Gaussian mechanism (Park et al., VIPS, 2020, section 7).

This example fits it to scikit-learn's digits, binarized, without noise and
at two privacy levels, and shows the learned weights of each hidden unit as
an image, samples drawn from each model, and the held-out log-likelihood,
computed exactly by enumerating the 2**10 hidden states.
"""

# %%
# The data
# --------
#
# 1797 images of 8 x 8 pixels, a pixel on when its grey level is above 7.

import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from skprivfact.sbn import DPSigmoidBeliefNet, sigmoid_belief_net_log_likelihood

X = (load_digits().data > 7).astype(float)
X_train, X_test = train_test_split(X, test_size=0.2, random_state=0)

# %%
# Fits
# ----
#
# Without noise, plain variational Bayes over the whole training set; with
# noise, Poisson batches of expected size 500 (so that subsampling amplifies
# the privacy of each release) over 15 passes. The guarantee is for replacing
# one image by another.

settings = {
    "non-private": dict(epsilon=float("inf"), max_iter=60),
    "epsilon = 8": dict(epsilon=8.0, batch_size=500, max_iter=15),
    "epsilon = 2": dict(epsilon=2.0, batch_size=500, max_iter=15),
}
models = {}
for name, params in settings.items():
    models[name] = DPSigmoidBeliefNet(10, delta=1e-5, random_state=0, **params).fit(
        X_train
    )
    model = models[name]
    log_likelihood = sigmoid_belief_net_log_likelihood(
        X_test, model.components_.T, model.intercept_visible_, model.intercept_hidden_
    ).mean()
    print(
        f"{name:>12}: held-out log-likelihood {log_likelihood:.2f} nats per image, "
        f"epsilon spent {model.privacy_spent_[0]:.3g}"
    )

# %%
# Learned weights
# ---------------
#
# Row ``k`` of ``components_`` holds the weights from hidden unit ``k`` to the
# 64 pixels: red pixels are switched on by the unit, blue ones off.

fig, axes = plt.subplots(len(models), 10, figsize=(10, 1.2 * len(models) + 0.4))
for row, (name, model) in enumerate(models.items()):
    limit = np.abs(model.components_).max()
    for k, ax in enumerate(axes[row]):
        ax.imshow(
            model.components_[k].reshape(8, 8), cmap="RdBu_r", vmin=-limit, vmax=limit
        )
        ax.set_xticks([])
        ax.set_yticks([])
    axes[row, 0].set_ylabel(name, rotation=0, ha="right", va="center")
fig.suptitle("Weights of the 10 hidden units")
plt.show()

# %%
# Samples
# -------
#
# Ancestral sampling: hidden units from their prior, then pixels given them.

fig, axes = plt.subplots(len(models), 10, figsize=(10, 1.2 * len(models) + 0.4))
for row, (name, model) in enumerate(models.items()):
    draws = model.sample(10, random_state=1)
    for ax, draw in zip(axes[row], draws):
        ax.imshow(draw.reshape(8, 8), cmap="gray_r")
        ax.set_xticks([])
        ax.set_yticks([])
    axes[row, 0].set_ylabel(name, rotation=0, ha="right", va="center")
fig.suptitle("Samples from each model")
plt.show()

# %%
# Hidden features
# ---------------
#
# :meth:`~skprivfact.DPSigmoidBeliefNet.transform` gives the posterior
# probability of each hidden unit for each image: features for a downstream
# model, for example :class:`~skprivfact.DPBayesLogReg` in a
# :class:`~sklearn.pipeline.Pipeline`.

features = models["non-private"].transform(X_test[:5])
print(np.round(features, 2))
