"""Expected failures of tests in files whose owners have yet to update them.

Each entry names a test that asserts behaviour an issue deliberately changed,
in a file this change could not edit; its owner removes the entry with the
update. The marks are strict: an entry whose test passes fails the run.
"""

import pytest

OUTDATED_TESTS = {
    "tests/test_poisson_mf.py::test_verbose_output": (
        "asserts PrivatePoissonMF's former verbose lines ('iteration 5: "
        "log-likelihood per entry', 'chain 0: sweep 10/10'); issue 16 replaced "
        "them by the shared format of skprivfact.utils._progress, tested in "
        "tests/test_conventions.py"
    ),
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        reason = OUTDATED_TESTS.get(item.nodeid)
        if reason is not None:
            item.add_marker(pytest.mark.xfail(reason=reason, strict=True))
