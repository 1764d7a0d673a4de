"""The one-BLAS-thread controller: its faster scan finds what threadpoolctl's own finds."""

from threadpoolctl import ThreadpoolController

from skbayes_sg import _blas


def test_scan_skipping_extension_modules_finds_every_library():
    ours = _blas._new_controller()
    assert isinstance(ours, _blas._LibraryController)
    theirs = ThreadpoolController()
    found = sorted(lib.filepath for lib in ours.lib_controllers)
    assert found == sorted(lib.filepath for lib in theirs.lib_controllers)
    assert ours.select(user_api="blas").lib_controllers


def test_limit_sets_one_thread_and_restores():
    before = [lib.num_threads for lib in ThreadpoolController().select(user_api="blas").lib_controllers]
    with _blas.one_blas_thread():
        inside = [lib.num_threads for lib in ThreadpoolController().select(user_api="blas").lib_controllers]
    assert inside == [1] * len(before)
    assert [lib.num_threads for lib in ThreadpoolController().select(user_api="blas").lib_controllers] == before


def _threads_after_one_blas_thread():
    import os

    import numpy as np

    before = len(os.listdir("/proc/self/task"))
    with _blas.one_blas_thread():
        np.ones((2, 1, 30)) @ np.ones((30, 500))
    return before, len(os.listdir("/proc/self/task"))


def test_a_forked_worker_of_a_fit_starts_no_blas_threads():
    # A worker forked inside a fit inherits its one BLAS thread: setting it again would restart
    # OpenBLAS's thread server there, whose new threads spin for about 0.1 s each, on the cores
    # the workers' first rounds need.
    import multiprocessing
    import os

    import numpy as np
    import pytest

    if "fork" not in multiprocessing.get_all_start_methods() or not os.path.isdir("/proc/self/task"):
        pytest.skip("no fork, or no /proc to count threads")
    np.ones((300, 300)) @ np.ones((300, 300))  # the BLAS thread servers up, as in a fit's process
    with _blas.one_blas_thread():
        with multiprocessing.get_context("fork").Pool(1) as pool:
            before, after = pool.apply(_threads_after_one_blas_thread)
    assert after == before
    # Where the count is not one, it is set (and restored), as before.
    test_limit_sets_one_thread_and_restores()
