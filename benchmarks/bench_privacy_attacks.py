"""The attacks on the central estimators' randomness, replayed against the engine.

Run from the project root (with the package installed, or ``PYTHONPATH=.``)::

    python benchmarks/bench_privacy_attacks.py [n_trials] [--control]

``--control`` runs the same attacks inside ``reproducible_noise`` (the
testing mode, whose noise is replayable by design): they must succeed there,
which shows that they would catch replayable noise.

For each central-DP estimator (one full-batch release per fit, small data):

replay      the attacker knows every record but one and the seed. Two fits
            with the same ``random_state`` (and after the same
            ``np.random.seed``) on the same data: the root mean square of the
            difference of their releases' noise, over the noise std (sqrt(2)
            for independent noise, 0 for replayed noise).
membership  at a claimed epsilon of 0.1, the attacker refits on the
            neighbouring dataset (the target record removed or replaced) with
            the victim's seed and guesses "member" when the victim's release is
            closer to what the record's presence predicts: the fraction of
            correct guesses over ``n_trials`` victims (0.5 is chance; with
            replayable noise it was 4 of 4).
copies      DPLDA half spent by partial_fit, deep-copied and pickled: the
            difference of the next releases of the original and of each copy,
            over the noise std.
"""

import copy
import math
import pickle
import sys
import warnings

import numpy as np

from skprivfact import DPLDA, DPBayesLogReg, DPSEPRegressor
from skprivfact.privacy import PrivacyEngine, reproducible_noise


class Recorder:
    """Wraps PrivacyEngine.release to keep each release's clean and noisy blocks."""

    def __init__(self):
        self.calls = []
        self._original = PrivacyEngine.release

    def __enter__(self):
        recorder = self

        def release(engine, blocks, sensitivities, **kwargs):
            clean = [np.array(b, dtype=float) for b in blocks]
            noisy = recorder._original(engine, blocks, sensitivities, **kwargs)
            scale = engine.noise_scales(sensitivities)[0] if engine.plan.noise_multiplier else 0
            recorder.calls.append((clean[0], noisy[0].copy(), scale))
            return noisy

        PrivacyEngine.release = release
        return self

    def __exit__(self, *exc):
        PrivacyEngine.release = self._original


def cases(epsilon):
    rng = np.random.RandomState(0)
    X_lr = rng.uniform(-0.3, 0.3, size=(40, 3))
    y_lr = (rng.uniform(size=40) > 0.5).astype(int)
    X_sep = rng.uniform(-0.5, 0.5, size=(40, 2))
    y_sep = X_sep @ [0.5, -0.5]
    X_lda = rng.poisson(2.0, size=(40, 8))
    return {
        "DPBayesLogReg": (
            lambda seed: DPBayesLogReg(
                epsilon=epsilon, data_norm=1.0, max_iter=1, fit_intercept=False,
                random_state=seed,
            ),
            (X_lr, y_lr),
            (X_lr[:-1], y_lr[:-1]),  # add/remove in full batch
        ),
        "DPLDA": (
            lambda seed: DPLDA(
                2, epsilon=epsilon, batch_size=1000, doc_length=50, clip_norm=5.0,
                max_doc_update_iter=5, random_state=seed,
            ),
            (X_lda, None),
            (np.vstack([X_lda[:-1], np.eye(8, dtype=int)[:1]]), None),
        ),
        "DPSEPRegressor": (
            lambda seed: DPSEPRegressor(
                epsilon=epsilon, clip_norm=0.05, max_iter=1, damping=1.0,
                noise_variance=0.01, bounds_X=(-1, 1), bounds_y=(-1, 1),
                random_state=seed,
            ),
            (X_sep, y_sep),
            (X_sep, np.concatenate([y_sep[:-1], [-y_sep[-1]]])),
        ),
    }


def fit(estimator, data):
    X, y = data
    return estimator.fit(X) if y is None else estimator.fit(X, y)


def replay(name, make, data):
    with Recorder() as recorder:
        for _ in range(2):
            np.random.seed(7)
            fit(make(0), data)
    (clean_a, noisy_a, scale), (clean_b, noisy_b, _) = recorder.calls
    difference = (noisy_a - clean_a) - (noisy_b - clean_b)
    ratio = math.sqrt(np.mean(difference**2)) / scale
    print(f"  {name}: replay: rms difference of the two noises / noise std = {ratio:.3f}")


def membership(name, make, member, neighbour, n_trials):
    correct = 0
    rng = np.random.RandomState(1)
    for trial in range(n_trials):
        is_member = bool(rng.uniform() < 0.5)
        with Recorder() as recorder:
            fit(make(trial), member if is_member else neighbour)  # the victim
            fit(make(trial), neighbour)  # the attacker's replay without the record
            fit(make(trial), member)  # and with it
        (_, victim, _), (clean_out, replay_out, _), (clean_in, replay_in, _) = recorder.calls
        # With replayable noise, victim - (replay - clean) is the clean release.
        denoised_out = victim - (replay_out - clean_out)
        denoised_in = victim - (replay_in - clean_in)
        guess = np.linalg.norm(denoised_in - clean_in) < np.linalg.norm(
            denoised_out - clean_out
        )
        correct += guess == is_member
    print(
        f"  {name}: membership at epsilon 0.1: {correct} of {n_trials} correct "
        f"({correct / n_trials:.2f})"
    )


def copies():
    rng = np.random.RandomState(0)
    X = rng.poisson(2.0, size=(200, 8))
    for how in ("deepcopy", "pickle"):
        model = DPLDA(2, epsilon=1.0, batch_size=20, max_iter=5, doc_length=20)
        model.partial_fit(X)
        twin = copy.deepcopy(model) if how == "deepcopy" else pickle.loads(pickle.dumps(model))
        with Recorder() as recorder:
            model.partial_fit(X)
            twin.partial_fit(X)
        (clean_a, noisy_a, scale), (clean_b, noisy_b, _) = recorder.calls
        difference = (noisy_a - clean_a) - (noisy_b - clean_b)
        ratio = math.sqrt(np.mean(difference**2)) / scale
        print(f"  DPLDA {how}: rms difference of the next noises / noise std = {ratio:.3f}")


def main(n_trials):
    print("== replay (same random_state, same np.random.seed), epsilon 1 ==")
    for name, (make, member, _) in cases(1.0).items():
        replay(name, make, member)
    print(f"== membership by replaying the noise, epsilon 0.1, {n_trials} victims ==")
    for name, (make, member, neighbour) in cases(0.1).items():
        membership(name, make, member, neighbour, n_trials)
    print("== copies continue with independent noise ==")
    copies()


if __name__ == "__main__":
    warnings.simplefilter("ignore")
    if "-h" in sys.argv or "--help" in sys.argv:
        print(__doc__)
        sys.exit()
    arguments = [a for a in sys.argv[1:] if a != "--control"]
    if len(arguments) > 1 or (arguments and not arguments[0].isdigit()):
        sys.exit(f"usage: {sys.argv[0]} [n_trials] [--control]")
    n_trials = int(arguments[0]) if arguments else 200
    if "--control" in sys.argv:
        print("(control: inside reproducible_noise, where the noise replays)")
        with reproducible_noise(0):
            main(n_trials)
    else:
        main(n_trials)
