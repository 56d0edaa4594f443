"""Acceptance measurements for DPSigmoidBeliefNet.

Run from the project root (with the package installed, or ``PYTHONPATH=.``),
one section or all::

    python benchmarks/bench_sbn.py [synthetic] [digits] [private] [speed]

synthetic   non-private fit on 50,000 rows drawn from a known network (64
            visible, 10 hidden; make_sigmoid_belief_net, seed 0): exact held-out
            log-likelihood (2**10 hidden states enumerated) of the learned
            posterior-mean network against the true network's, on 10,000 fresh
            rows; with the importance-sampled estimate and the variational bound
digits      scikit-learn's digits binarized (pixel > 7), 80/20 split (seed 0),
            10 hidden units: exact held-out log-likelihood of the non-private
            SBN against BernoulliRBM's (its partition function enumerated over
            the 2**10 hidden states), the RBM's learning rate and epochs chosen
            on the test set from a grid (in its favour)
private     the synthetic set at epsilon in {0.5, 1, 2, 4}, delta 1e-5,
            against epsilon = inf with the same batches and passes: exact
            held-out log-likelihood and the pixel-wise prediction accuracy of
            Park et al. (reconstruct each test row through q(h | v), threshold
            the visible probabilities at 1/2, fraction of pixels right);
            REPEATS runs each (the noise is secret: runs differ)
speed       seconds per pass on 50,000 x 64 against BernoulliRBM per epoch,
            10 hidden units each, BLAS on one thread, median of 3; the RBM at
            its default batch_size=10 and at 100
            (a pass: fit time with max_iter=3 over 3, initialisation included)

Every figure is printed with the setting that produced it.
"""

import time

import numpy as np
from _sections import run_sections
from scipy import special
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.neural_network import BernoulliRBM
from threadpoolctl import threadpool_limits

from skprivfact import DPSigmoidBeliefNet
from skprivfact.datasets import make_sigmoid_belief_net
from skprivfact.sbn import sigmoid_belief_net_log_likelihood

INF = float("inf")
EPSILONS = [0.5, 1.0, 2.0, 4.0]
DELTA = 1e-5
REPEATS = 2
N_TRAIN, N_TEST = 50_000, 10_000
# Non-private: plain VB (full batch) until it settles.
SYNTHETIC = {"max_iter": 60}
# Private: Poisson batches of expected size 2500 (q = 0.05), 10 passes (200
# releases).
PRIVATE = {"batch_size": 2500, "max_iter": 10}


def synthetic_data():
    X, _, params = make_sigmoid_belief_net(N_TRAIN + N_TEST, 64, 10, random_state=0)
    return X[:N_TRAIN], X[N_TRAIN:], params


def sbn_log_likelihood(model, X):
    return sigmoid_belief_net_log_likelihood(
        X, model.components_.T, model.intercept_visible_, model.intercept_hidden_
    )


def rbm_log_likelihood(rbm, X):
    """Exact log p(v) under a BernoulliRBM with few hidden units."""
    W, b, c = rbm.components_, rbm.intercept_visible_, rbm.intercept_hidden_
    K = W.shape[0]
    states = ((np.arange(2**K)[:, None] >> np.arange(K)) & 1).astype(float)
    log_z = special.logsumexp(states @ c + np.logaddexp(0, states @ W + b).sum(axis=1))
    return X @ b + np.logaddexp(0, X @ W.T + c).sum(axis=1) - log_z


def pixel_accuracy(model, X):
    """Park et al.'s pixel-wise prediction accuracy of reconstructions."""
    mu = model.transform(X)
    probability = special.expit(mu @ model.components_ + model.intercept_visible_)
    return float(np.mean((probability > 0.5) == (X > 0.5)))


def section_synthetic():
    train, test, params = synthetic_data()
    true = sigmoid_belief_net_log_likelihood(test, **params).mean()
    start = time.perf_counter()
    model = DPSigmoidBeliefNet(10, epsilon=INF, random_state=0, **SYNTHETIC).fit(train)
    elapsed = time.perf_counter() - start
    learned = sbn_log_likelihood(model, test).mean()
    print(f"[synthetic] settings {SYNTHETIC}, fit {elapsed:.1f} s")
    print(f"[synthetic] true network, exact held-out LL      {true:.4f} nats/row")
    print(f"[synthetic] learned (posterior mean), exact LL    {learned:.4f}")
    print(f"[synthetic] relative gap (learned - true)/|true| {(learned - true) / abs(true):+.4%}")
    print(f"[synthetic] importance-sampled estimate (S=200)   {model.score(test):.4f}")
    print(f"[synthetic] variational lower bound              {model.lower_bound(test).mean():.4f}")
    print(f"[synthetic] pixel accuracy learned {pixel_accuracy(model, test):.4f}")


def section_digits():
    X = (load_digits().data > 7).astype(float)
    train, test = train_test_split(X, test_size=0.2, random_state=0)
    best = None
    for rate in (0.003, 0.01, 0.03, 0.1):
        for n_iter in (50, 200, 500):
            rbm = BernoulliRBM(
                n_components=10, learning_rate=rate, n_iter=n_iter, random_state=0
            ).fit(train)
            score = rbm_log_likelihood(rbm, test).mean()
            print(f"[digits] BernoulliRBM lr={rate} n_iter={n_iter}: exact LL {score:.4f}")
            if best is None or score > best[0]:
                best = (score, rate, n_iter)
    results = {}
    for max_local_iter in (3, 10):
        model = DPSigmoidBeliefNet(
            10, epsilon=INF, max_iter=300, max_local_iter=max_local_iter, random_state=0
        )
        model.fit(train)
        results[max_local_iter] = sbn_log_likelihood(model, test).mean()
        print(
            f"[digits] DPSigmoidBeliefNet(10, epsilon=inf, max_iter=300, "
            f"max_local_iter={max_local_iter}): exact LL {results[max_local_iter]:.4f}, "
            f"importance estimate {model.score(test):.4f}, lower bound "
            f"{model.lower_bound(test).mean():.4f}"
        )
    default = BernoulliRBM(n_components=10, random_state=0).fit(train)
    print(f"[digits] BernoulliRBM defaults: exact LL {rbm_log_likelihood(default, test).mean():.4f}")
    print(
        f"[digits] best RBM (lr={best[1]}, n_iter={best[2]}) {best[0]:.4f} against "
        f"SBN {max(results.values()):.4f} nats/row (exact, 360 held-out rows)"
    )


def section_private():
    train, test, params = synthetic_data()
    true = sigmoid_belief_net_log_likelihood(test, **params).mean()
    p = train.mean(axis=0)
    independent = (test @ np.log(p) + (1 - test) @ np.log(1 - p)).mean()
    print(
        f"[private] settings {PRIVATE}, delta {DELTA}; true network LL {true:.4f}, "
        f"independent pixels (training marginals) {independent:.4f}, pixel "
        f"accuracy {np.mean((p > 0.5) == (test > 0.5)):.4f}"
    )
    for epsilon in [INF] + EPSILONS:
        lls, accs, sigmas = [], [], []
        for repeat in range(REPEATS if epsilon != INF else 1):
            model = DPSigmoidBeliefNet(
                10, epsilon=epsilon, delta=DELTA, random_state=repeat, **PRIVATE
            ).fit(train)
            lls.append(sbn_log_likelihood(model, test).mean())
            accs.append(pixel_accuracy(model, test))
            sigmas.append(model.noise_multiplier_)
        print(
            f"[private] epsilon={epsilon}: exact held-out LL {np.mean(lls):.4f} "
            f"(runs {np.round(lls, 3).tolist()}), pixel accuracy {np.mean(accs):.4f} "
            f"(runs {np.round(accs, 4).tolist()}), noise multiplier {sigmas[0]:.3f}",
            flush=True,
        )


def section_speed():
    X, _, _ = make_sigmoid_belief_net(N_TRAIN, 64, 10, random_state=0)
    DPSigmoidBeliefNet(10, epsilon=INF, max_iter=1).fit(X[:100])  # compile
    passes, repeats = 3, 3
    with threadpool_limits(1):
        timings = {}
        for name, make in (
            ("DPSigmoidBeliefNet (full batch, 1 pass)", lambda: DPSigmoidBeliefNet(
                10, epsilon=INF, max_iter=passes, random_state=0)),
            ("DPSigmoidBeliefNet (batch_size=2500, eps=1, 1 pass)", lambda: DPSigmoidBeliefNet(
                10, epsilon=1.0, batch_size=2500, max_iter=passes, random_state=0)),
            ("BernoulliRBM (batch_size=10, 1 epoch)", lambda: BernoulliRBM(
                n_components=10, n_iter=passes, random_state=0)),
            ("BernoulliRBM (batch_size=100, 1 epoch)", lambda: BernoulliRBM(
                n_components=10, n_iter=passes, batch_size=100, random_state=0)),
        ):
            runs = []
            for _ in range(repeats):
                estimator = make()
                start = time.perf_counter()
                estimator.fit(X)
                runs.append((time.perf_counter() - start) / passes)
            timings[name] = float(np.median(runs))
            print(f"[speed] {name}: {timings[name]:.3f} s per pass (median of {repeats})")
    names = list(timings)
    for sbn_name in names[:2]:
        for rbm_name in names[2:]:
            print(
                f"[speed] ratio {sbn_name} / {rbm_name}: "
                f"{timings[sbn_name] / timings[rbm_name]:.2f}"
            )


SECTIONS = {
    "synthetic": section_synthetic,
    "digits": section_digits,
    "private": section_private,
    "speed": section_speed,
}

if __name__ == "__main__":
    run_sections(SECTIONS, __doc__, wrap=lambda: threadpool_limits(1))
