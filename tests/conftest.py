"""Test-wide settings.

Every test runs inside :func:`skprivfact.privacy.reproducible_noise`, so that
private fits are repeatable (scikit-learn's common checks fit twice with the
same ``random_state`` and compare). Tests of the real, secret randomness of
releases opt out with ``@pytest.mark.secret_noise``.

``OUTDATED_TESTS`` lists tests that assert behaviour an issue deliberately
changed, in a file whose owner has yet to update them; the marks are strict:
an entry whose test passes fails the run.
"""

import pytest

from skprivfact.privacy import reproducible_noise

OUTDATED_TESTS = {}


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "secret_noise: run without reproducible_noise(), with the operating "
        "system's randomness for every release",
    )


def pytest_collection_modifyitems(config, items):
    for item in items:
        reason = OUTDATED_TESTS.get(item.nodeid)
        if reason is not None:
            item.add_marker(pytest.mark.xfail(reason=reason, strict=True))


@pytest.fixture(autouse=True)
def _reproducible_releases(request):
    if request.node.get_closest_marker("secret_noise"):
        yield
        return
    with reproducible_noise(20261124):
        yield
