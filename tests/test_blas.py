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
