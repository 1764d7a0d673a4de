"""One BLAS thread where the package asks for it, at a fraction of threadpoolctl's usual cost.

``threadpoolctl.threadpool_limits`` scans the process's shared libraries and queries every
BLAS it finds on each call: 14 ms with NumPy, SciPy and scikit-learn loaded, paid once per
fit and once per round of the chains (a default fit on breast cancer made five such calls,
as long as its MAP). A :class:`threadpoolctl.ThreadpoolController` made once per process
does the scan once; its ``limit`` then costs microseconds. The controller is made at the
first call, after the package's imports have loaded every BLAS it uses; it is rebuilt when
the process has loaded further libraries since (checked by their count, which is cheap).

The scan itself resolves the real path of every shared object the process has mapped
(10 ms in a fresh process with the scientific stack loaded, a tenth of a small default
fit); nine in ten are Python extension modules (``*.cpython-*.so``, ``*.abi3.so``), which
are never a BLAS or an OpenMP runtime (a BLAS reached through a symbolic link has a
library's name), so they are skipped. The objects are listed by the dynamic loader
(``dl_iterate_phdr``, threadpoolctl's route on other Unix systems) rather than by reading
``/proc/self/maps``, which the kernel writes out mapping by mapping (3 ms of a fresh
process's first fit, against under 2 ms for the whole scan this way).
"""

import contextlib
import functools
import re
import sys

from threadpoolctl import ThreadpoolController, threadpool_limits

_CONTROLLER = None
_MODULES_SEEN = 0
_EXTENSION_MODULE = re.compile(r"\.cpython-[^/]*\.so$|\.abi3\.so$")


class _LibraryController(ThreadpoolController):
    """threadpoolctl's controller, its Linux scan skipping Python extension modules."""

    def _find_libraries_with_linux(self):
        self._find_libraries_with_dl_iterate_phdr()
        if not self.lib_controllers:  # a loader without dl_iterate_phdr: the mapped files
            super()._find_libraries_with_linux()

    def _make_controller_from_path(self, filepath):
        if not _EXTENSION_MODULE.search(filepath):
            super()._make_controller_from_path(filepath)


def _new_controller():
    try:
        return _LibraryController()
    except Exception:  # threadpoolctl's internals moved: its own full scan
        return ThreadpoolController()


def _controller():
    global _CONTROLLER, _MODULES_SEEN
    # A new extension module may bring its own BLAS (e.g. a later SciPy submodule): rescan.
    if _CONTROLLER is None or len(sys.modules) != _MODULES_SEEN:
        _CONTROLLER, _MODULES_SEEN = _new_controller(), len(sys.modules)
    return _CONTROLLER


def one_blas_thread():
    """A context manager limiting every BLAS of the process to one thread, as
    ``threadpool_limits(limits=1, user_api="blas")`` does.

    Where every BLAS already runs one thread it sets nothing: in a worker forked during a fit
    (which inherits the fit's limit), setting OpenBLAS's thread count restarts its thread
    server, whose new threads then spin for about 0.1 s each (two per worker, one per
    OpenBLAS loaded), taking the cores the workers' first rounds run on.
    """
    try:
        blas = _controller().select(user_api="blas")
        if all(lib.num_threads == 1 for lib in blas.lib_controllers):
            return contextlib.nullcontext()
        return blas.limit(limits=1)
    except Exception:  # a controller that cannot be made here: threadpoolctl's own path
        return threadpool_limits(limits=1, user_api="blas")


def with_one_blas_thread(func):
    """Decorator: ``func`` runs under :func:`one_blas_thread`."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        with one_blas_thread():
            return func(*args, **kwargs)

    return wrapper
