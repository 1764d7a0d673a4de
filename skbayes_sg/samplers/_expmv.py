"""The C step of mCCAdL: ``p <- exp(t Sigma~) p`` without forming any matrix.

Wei & Shang (2026), section 2.2: the covariance-control sub-system
``dp = Sigma~ p dt`` with ``Sigma~ = -(h/2) beta Sigma(theta)`` (eq. 16) has the exact
solution ``p(t) = exp(t Sigma~) p(0)`` (eq. 17). Following Al-Mohy & Higham (2011,
"Computing the action of the matrix exponential", SIAM J. Sci. Comput. 33(2)), it is
approximated by

- a shift ``Sigma^ = Sigma~ - mu~ I`` with ``mu~ = tr(Sigma~) / N_d`` (eq. 18),
- a scaling ``exp(t Sigma^) = (exp(t Sigma^ / s))^s`` with an integer ``s >= 1`` (eq. 19),
- a Taylor series of degree ``m`` for each factor (eqs. 20-22),

with ``s`` and ``m`` chosen by Al-Mohy & Higham's backward-error criterion: the truncated
series is the exact exponential of ``t Sigma^ + Delta`` with
``||Delta|| / ||t Sigma^|| <= tol`` whenever ``||t Sigma^|| / s <= theta_m`` (their
section 3, Table 3.1), and ``(m, s)`` minimises the number ``m s`` of products. Each
factor's series stops early once two consecutive terms are negligible (their
Algorithm 3.2).

Every product with ``Sigma`` goes through the minibatch's per-example gradient operator
(:class:`NoiseCovariance`), O(n P) per product; the trace comes from the sum of squares.

Choice of implementation. ``scipy.sparse.linalg.expm_multiply`` implements the same
algorithm, but given a ``LinearOperator`` it estimates 1-norms of powers of the matrix with
``onenormest`` (many extra products) and always works to double precision. This module
uses the 2-norm of the *symmetric* ``Sigma^`` (bounded from the trace, or estimated by a
warm-started power iteration, with an a-posteriori check on the growth of the Taylor
terms) and a requested tolerance. At equal (double) accuracy it took 1.2-5.3x less time
than scipy on minibatch covariances of a9a and of the mCCAdL paper's regression over
``||(h^2/2) Sigma|| = 0.004-89`` (one case, 0.8x in another run, pays a cold-started power
iteration that a chain amortises); at the samplers' default tolerance it needs 3-8x fewer
products
(``benchmarks/mccadl_expmv_vs_scipy.py``, ``tests/test_expmv.py``). It is the one used.
"""

import copy
import math
from bisect import bisect_left
from functools import lru_cache

import numpy as np
from scipy.linalg import get_lapack_funcs
from scipy.special import gammaln

from ._row_space import row_space_applies, row_space_c_step

# LAPACK's divide-and-conquer tridiagonal eigensolver, the driver scipy's
# ``eigh_tridiagonal`` picks by default, called directly: the Lanczos iteration solves one
# small tridiagonal problem per product, and the wrapper's validation cost five times the
# solve on the 2-20 dimensional T_k of mCCAdL's C step.
_stevd = get_lapack_funcs("stevd", dtype=np.float64)

#: Default tolerance ``2^-6``. The backward error is a *relative perturbation of Sigma*: the
#: C step computed to tolerance ``tol`` is the exact C step for some ``Sigma (1 + delta)``,
#: ``||delta|| <= tol``. Sigma itself is a minibatch estimate (eq. 15) whose relative error
#: is of order ``sqrt(2 / n)`` per entry at best (6% at n = 500) and ``sqrt(P / n)`` in
#: norm, and whatever the C step leaves undamped the thermostat absorbs; so 1.6% adds
#: nothing measurable. Against Al-Mohy & Higham's "half" precision ``2^-10`` it saves a
#: third of the products at the curvature step on a9a in theta (3.5 instead of 5.1 per
#: iteration; ``benchmarks/mccadl_throughput.py``, which also times an iteration against
#: SGHMC's). The scheme's weak second order needs the C step to be
#: only a second-order approximation (mCCAdL paper, section 2.3), which any ``tol`` gives.
DEFAULT_TOL = 2.0**-6

#: Largest Taylor degree. Al-Mohy & Higham use 55; the series of one factor sums terms of
#: size up to ``e^theta_m`` to a result as small as ``e^-theta_m`` (the shifted Sigma^ has
#: eigenvalues of both signs), so rounding grows like ``u e^(2 theta_m)``: with m <= 30,
#: ``theta_m <= 8.2`` at the default tolerance and ``<= 6.3`` at ``2^-24``, which keeps it
#: below the tolerance.
M_MAX = 30

_N_SERIES = 150  # terms of the backward-error series, as in Al-Mohy & Higham (2011)


@lru_cache(maxsize=16)
def taylor_thetas(tol=DEFAULT_TOL, m_max=M_MAX):
    """``theta_m``, m = 1..m_max: the largest ``||t A||/s`` with backward error ``<= tol``.

    The degree-``m`` Taylor polynomial ``T_m`` satisfies ``T_m(X) = exp(X + h(X))`` with
    ``h(x) = log(e^-x T_m(x)) = sum_{k>m} c_k x^k``; since
    ``||h(X)|| / ||X|| <= sum_{k>m} |c_k| ||X||^(k-1)``, ``theta_m`` solves
    ``sum_{k>m} |c_k| theta^(k-1) = tol`` (Al-Mohy & Higham 2011, eq. 3.11-3.12, the
    series truncated after 150 terms as they do). Computed once per ``tol`` in double
    precision; ``tests/test_expmv.py`` checks it against their Table 3.1.

    Returns
    -------
    thetas : ndarray of shape (m_max,)
        ``thetas[m - 1] = theta_m``.
    """
    thetas = np.empty(m_max)
    for m in range(1, m_max + 1):
        K = m + _N_SERIES
        # Coefficients of e^-x T_m(x) = 1 - e^-x sum_{j>m} x^j / j!: a_0 = 1, a_1..a_m = 0;
        # a_k = sum_{j<=min(k,m)} (-1)^(k-j) / (j! (k-j)!), in logs to avoid overflow.
        k = np.arange(K + 1)[:, None]
        j = np.arange(m + 1)[None, :]
        valid = j <= k
        kj = np.where(valid, k - j, 0)
        terms = np.where(valid, (-1.0) ** kj * np.exp(-gammaln(j + 1.0) - gammaln(kj + 1.0)), 0.0)
        a = terms.sum(axis=1)
        a[0], a[1 : m + 1] = 1.0, 0.0
        # log of a power series with a_0 = 1: k c_k = k a_k - sum_{i<k} i c_i a_{k-i}.
        c = np.zeros(K + 1)
        for k in range(m + 1, K + 1):
            i = np.arange(m + 1, k)
            c[k] = a[k] - np.dot(i * c[i], a[k - i]) / k
        coef = np.abs(c[m + 1 :])
        powers = np.arange(m, K)  # theta^(k-1) for k = m+1..K

        def excess(theta, coef=coef, powers=powers):  # bound now: the loop rebinds both
            with np.errstate(over="ignore"):
                return np.sum(coef * np.exp(powers * np.log(theta))) - tol

        lo, hi = 1e-30, 1.0
        while excess(hi) < 0:
            lo, hi = hi, 2.0 * hi
        for _ in range(80):
            mid = np.sqrt(lo * hi)
            if excess(mid) < 0:
                lo = mid
            else:
                hi = mid
        thetas[m - 1] = lo
    return thetas


def select_degree(norm, tol=DEFAULT_TOL, m_max=M_MAX):
    """Taylor degree ``m`` and scaling ``s`` for ``||t Sigma^|| = norm``.

    Minimises ``m * s`` subject to ``norm / s <= theta_m`` (Al-Mohy & Higham 2011, eq. 3.10),
    the smallest ``m`` among ties. Called every iteration, so the common case (``s = 1``
    feasible) avoids array work.

    Returns
    -------
    m, s : int
    """
    if norm == 0.0:
        return 0, 1
    thetas = _theta_list(tol, m_max)
    if norm <= thetas[-1]:
        best_m = bisect_left(thetas, norm) + 1
        best = (best_m, best_m, 1)
        # A degree below best_m needs s >= 2, so only m < best_m / 2 can be cheaper.
        for m in range(1, (best_m + 1) // 2):
            s = math.ceil(norm / thetas[m - 1])
            if (m * s, m) < best[:2]:
                best = (m * s, m, s)
        return best[1], best[2]
    best = None
    for m in range(1, m_max + 1):
        s = math.ceil(norm / thetas[m - 1])
        if best is None or m * s < best[0]:
            best = (m * s, m, s)
    return best[1], best[2]


#: ``taylor_thetas(DEFAULT_TOL, M_MAX)``, as it computes them (``tests/test_expmv.py`` checks them
#: bit for bit): the series and bisections take 25 ms, paid by every process that runs a C step.
_DEFAULT_THETAS = (
    0.03061062480123693,
    0.27600596746134914,
    0.610785361808565,
    0.9558726702452045,
    1.2940971299134676,
    1.6262345795853264,
    1.9511562957335542,
    2.271276373650445,
    2.5866159870218506,
    2.898543281531446,
    3.2072553155280397,
    3.5134949118565046,
    3.817463687970512,
    4.119586738456274,
    4.420027978158147,
    4.71905172929378,
    5.01678437798259,
    5.31339981227507,
    5.608993396126012,
    5.903686682048511,
    6.197552727865171,
    6.490679127688543,
    6.783122166202203,
    7.074947391369522,
    7.366199585381158,
    7.656929362685,
    7.947172785959203,
    8.236967857582359,
    8.526342186493643,
    8.815326945015133,
)


@lru_cache(maxsize=16)
def _theta_list(tol, m_max):
    if tol == DEFAULT_TOL and m_max == M_MAX:
        return list(_DEFAULT_THETAS)
    return list(taylor_thetas(tol, m_max))


def expmv(t, matvec, b, trace, norm, tol=DEFAULT_TOL, m_max=M_MAX, norm_bound=np.inf, degree=None):
    """``exp(t A) b`` by the shifted, scaled, truncated Taylor series (eqs. 18-22).

    Parameters
    ----------
    t : float
        The time ``t`` (the mCCAdL step ``h``).
    matvec : callable
        ``v -> A v`` for the symmetric ``N_d x N_d`` matrix ``A`` (``Sigma~``).
    b : ndarray of shape (N_d,)
        The vector (the momentum); not modified.
    trace : float
        ``tr(A)``; the shift is ``mu~ = trace / N_d``.
    norm : float
        The 2-norm, or an estimate of it, of the shifted ``A - mu~ I``.
    tol : float, default=2**-10
        Requested relative backward error.
    m_max : int, default=30
    norm_bound : float, default=inf
        A guaranteed upper bound on that norm, if known.
    degree : tuple (m, s), optional
        ``select_degree(|t| min(norm, norm_bound), tol, m_max)`` when the caller has it
        already (the C step chooses between Taylor and Lanczos from it).

    Returns
    -------
    f : ndarray of shape (N_d,)
    n_products : int
        Products with ``A`` spent.

    Notes
    -----
    ``s`` and ``m`` are only as good as ``norm``. Every Taylor term gives a lower bound on
    it, ``k ||term_k|| / ||term_(k-1)|| <= t ||A - mu~ I|| / s``; when a term violates it,
    the estimate was too small (a truncated series with a too small ``s`` can grow without
    bound instead of decaying), and the computation restarts with the estimate raised
    (at most to ``norm_bound``).
    """
    t = float(t)
    mu = trace / b.size
    n_products = 0
    norm = min(norm, norm_bound)
    for _ in range(8):
        m, s = select_degree(abs(t) * norm, tol, m_max) if degree is None else degree
        degree = None
        f, k_used, observed = _taylor_steps(t, matvec, b, mu, m, s, tol, growth_limit(t, norm, s))
        n_products += k_used
        if observed is None or norm >= norm_bound:
            return f, n_products
        norm = min(max(2.0 * norm, 1.5 * observed * s / abs(t)), norm_bound)
    return f, n_products


def growth_limit(t, norm, s):
    """The largest ``k ||term_k|| / ||term_(k-1)||`` a Taylor factor's terms may show if the norm
    estimate ``norm`` of the shifted matrix is right: ``|t| norm / s``, with room for rounding
    (see :func:`expmv`, Notes)."""
    return abs(t) * norm / s * (1.0 + 1e-6) + 1e-300


def trace_norm_bound(tr, n_dims):
    """``max(tr - tr / N_d, tr / N_d)``: a true bound on ``||A - mu~ I||`` for a positive
    semidefinite ``A`` of trace ``tr`` (its largest eigenvalue is at most ``tr``), ``mu~`` the
    mean eigenvalue."""
    lam_bar = tr / n_dims
    return max(tr - lam_bar, lam_bar)


def covariance_trace(factor, sum_of_squares, n, mean_sq):
    """``tr(factor V)`` of ``n`` per-example gradients from their total sum of squares and their
    mean's squared norm (the centring's rounding clipped at 0)."""
    return factor * max(sum_of_squares - n * mean_sq, 0.0)


def _norm(v):
    """2-norm: ``sqrt(v @ v)`` (a third of np.linalg.norm's cost on short vectors), with
    np.linalg.norm's scaling only when squaring under- or overflows (a diverging chain)."""
    sq = float(v @ v)
    if 0.0 < sq < math.inf:
        return math.sqrt(sq)
    return float(np.linalg.norm(v))


def _taylor_steps(t, matvec, b, mu, m, s, tol, limit):
    """The ``s`` Taylor factors of Al-Mohy & Higham's Algorithm 3.2 with early termination.

    The termination test ``||term_(k-1)|| + ||term_k|| <= tol ||f||`` is theirs, in the
    2-norm (which the growth check needs anyway) rather than the infinity norm.

    Returns ``(f, n_products, observed)``; ``observed`` is not None when a term grew faster
    than ``limit`` allows (the norm was underestimated): the ratio seen, in units of
    ``||t A|| / s``.
    """
    eta = math.exp(t * mu / s)
    f = b.copy()
    n_products = 0
    for _ in range(s):
        term = f
        prev = _norm(f)
        if prev == 0.0 or not math.isfinite(prev):
            # Nothing to propagate, or a diverged state: the chain's finiteness check, not
            # this series, reports it.
            return f, n_products, None
        for k in range(1, m + 1):
            Ab = matvec(term)
            n_products += 1
            Ab -= mu * term
            Ab *= t / (s * k)
            term = Ab
            size = _norm(term)
            if not math.isfinite(size):
                return f + term, n_products, None
            if k * size > limit * prev:
                return f, n_products, k * size / prev
            f += term
            if size == 0.0 or prev + size <= tol * _norm(f):
                break
            prev = size
        f *= eta
    return f, n_products, None


def lanczos_expmv(t, matvec, b, tol=DEFAULT_TOL, k_max=60):
    """``exp(t A) b`` for a symmetric ``A`` by the Lanczos method.

    Builds an orthonormal basis ``V_k`` of the Krylov space of ``A`` and ``b`` with the
    tridiagonal ``T_k = V_k' A V_k``, and returns ``||b|| V_k exp(t T_k) e_1`` (Saad 1992,
    "Analysis of some Krylov subspace approximations to the matrix exponential operator";
    Hochbruck & Lubich 1997). For the negative semidefinite ``Sigma~`` the error falls
    superlinearly once ``k`` exceeds about ``sqrt(||t A||)``, against the ``||t A||``
    products a Taylor series needs: the cheaper method when ``||t Sigma~||`` is large, as
    for the DRBM at the papers' step sizes. Stops when Saad's a-posteriori estimate of the
    error, ``||b|| beta_k |e_k' exp(t T_k) e_1|`` (the size of the first neglected basis
    direction), falls to ``tol / 16`` relative: the estimate is sharp once convergence sets
    in but can understate the error just before, for large ``||t A||`` (at ``||A|| = 300``
    and ``tol = 2^-6`` stopping at ``tol`` left 8% error, ``tol / 16`` leaves 0.04%). The
    basis is fully reorthogonalised, which ``k << P`` makes cheap.

    Returns
    -------
    f : ndarray of shape (P,)
    n_products : int
    """
    beta0 = _norm(b)
    if beta0 == 0.0 or not math.isfinite(beta0):
        return b.copy(), 0
    P = b.size
    k_max = min(k_max, P)
    V = np.empty((k_max, P))
    V[0] = b / beta0
    alpha = np.empty(k_max)
    beta = np.empty(k_max)
    f = b.copy()
    for j in range(k_max):
        w = matvec(V[j])
        alpha[j] = float(w @ V[j])
        # Full reorthogonalisation against the basis so far (twice is enough, Parlett).
        for _ in range(2):
            w -= V[: j + 1].T @ (V[: j + 1] @ w)
        beta[j] = _norm(w)
        if not (math.isfinite(alpha[j]) and math.isfinite(beta[j])):
            # A diverged chain's covariance: let its finiteness check report it.
            return np.full_like(b, np.nan), j + 1
        evals, evecs = _eigh_tridiagonal(alpha[: j + 1], beta[:j])
        y = evecs @ (np.exp(t * evals) * evecs[0])
        f = beta0 * (V[: j + 1].T @ y)
        if not np.all(np.isfinite(f)):
            return f, j + 1
        error = beta0 * beta[j] * abs(y[j])
        # Converged, or an invariant subspace (beta_k ~ 0): the approximation is exact.
        if error <= tol / 16.0 * _norm(f) or j + 1 == k_max or beta[j] <= 1e-12 * abs(alpha[: j + 1]).max():
            return f, j + 1
        V[j + 1] = w / beta[j]
    return f, k_max


def _eigh_tridiagonal(d, e):
    """Eigenvalues and eigenvectors of the symmetric tridiagonal matrix with diagonal ``d`` and
    off-diagonal ``e``: ``scipy.linalg.eigh_tridiagonal(d, e)``, bit for bit, without its checks."""
    if d.size == 1:
        return d.copy(), np.ones((1, 1))
    w, v, info = _stevd(d, e)
    if info != 0:
        # Not converged (non-finite input is caught before): scipy's error, with its checks.
        from scipy.linalg import eigh_tridiagonal

        return eigh_tridiagonal(d, e)
    return w, v


class NoiseCovariance:
    """``coef * Sigma`` for one minibatch as an operator, ``Sigma = c V`` (mCCAdL eq. 15).

    ``V`` is the unbiased empirical covariance of the per-example gradients (CCAdL paper
    eq. 19) and ``c`` the target's ``noise_scale`` (``N^2 / n`` with replacement). Products
    cost two operator products, O(n P); the mean gradient is computed once. ``coef``
    folds a scalar such as ``-(h/2) beta`` into the products (for ``Sigma~``).

    Parameters
    ----------
    grads : PerExampleGradients
    noise_scale : float
    coef : float, default=1.0
    """

    def __init__(self, grads, noise_scale, coef=1.0):
        self.grads = grads
        n = grads.n_batch
        self.n = n
        self.noise_scale = noise_scale
        self.coef = coef
        self.g_bar = grads.mean()
        # V v = (G'G v - n g_bar g_bar' v) / (n - 1); every scalar folded into one factor.
        self.factor = coef * noise_scale / (n - 1) if n > 1 else 0.0
        self._trace = None

    def compact(self, n_products):
        """Hold ``coef * Sigma`` as an explicit ``P x P`` matrix if that is cheaper for ``n_products`` products.

        The matrix costs ``O(n P_in^2 + P^3)`` once (the Gram matrix of the centred
        per-example gradients, BLAS-3, then the change of coordinates) and ``P^2`` per
        product, against ``O(n P_in + P^2)`` per product through the rows (BLAS-2 and a
        handful of numpy calls). Worth it when one minibatch's covariance serves many
        products (mCCAdL's ``sigma_refresh``) and ``P`` is small against ``n`` times that
        number; never formed for ``P`` above :data:`COMPACT_MAX_PARAMS` (large models, which
        the estimators precondition diagonally) or for operators without a cheap dense form.

        Returns
        -------
        bool
            Whether the matrix is now in use.
        """
        costs = _compact_costs(self.grads)
        if costs is None:
            return False
        rows, build, per_product = costs
        if build + n_products * per_product >= n_products * rows:
            return False
        gram = self.grads.centred_gram()
        M = gram * self.factor
        # Symmetric up to rounding; made exactly so, since the Taylor series and the power
        # iteration rely on it.
        M += M.T
        M *= 0.5
        self._matrix = M
        self._trace = self.factor * max(float(np.trace(gram)), 0.0)
        self.grads = self.g_bar = None  # the products no longer need the rows
        return True

    _matrix = None

    @property
    def is_compact(self):
        """Whether ``coef * Sigma`` is held as an explicit matrix (:meth:`compact`)."""
        return self._matrix is not None

    def expm(self, t, tol=DEFAULT_TOL):
        """``exp(t coef Sigma)`` as a matrix, for a compact operator; kept for the next call.

        The same shifted, scaled Taylor series as :func:`expmv` (its backward error at most
        ``tol``), summed once as a matrix polynomial, so that each C step that reuses this
        ``Sigma`` is one matrix-vector product. The degree and scaling come from a true bound
        on the 2-norm of the shifted matrix, the smaller of the trace bound and its
        Frobenius norm, so no growth check is needed. Where the series would need more than
        :data:`LANCZOS_FROM` products, the exponential comes from the eigendecomposition
        (exact, ``O(P^3)``) instead.
        """
        key = (t, tol)
        if self._expm is not None and self._expm[0] == key:
            return self._expm[1]
        A = self._matrix
        P = A.shape[0]
        mu = float(np.trace(A)) / P
        shifted = A - mu * np.eye(P)
        tr = abs(self.trace())
        bound = min(max(tr - tr / P, tr / P), float(np.sqrt(np.einsum("ij,ij->", shifted, shifted))))
        if not math.isfinite(bound) or not math.isfinite(mu):
            # A diverged chain's covariance: let its finiteness check report it.
            E = np.full((P, P), np.nan)
            self._expm = (key, E)
            return E
        m, s = select_degree(abs(t) * bound, tol)
        if m * s > LANCZOS_FROM:
            # Large ||t Sigma||: the series would need many matrix products (a chain far too
            # hot, or a step far too large); the eigendecomposition of the symmetric matrix is
            # exact and costs a few.
            lam, V = np.linalg.eigh(A)
            E = (V * np.exp(t * lam)) @ V.T
            self._expm = (key, E)
            return E
        X = shifted * (t / s)
        # Horner: I + X (I + X/2 (I + ... (I + X/m))), m - 1 matrix products.
        diag = np.diag_indices(P)
        F = X * (1.0 / m)
        F[diag] += 1.0
        for k in range(m - 1, 0, -1):
            F = X @ F
            F *= 1.0 / k
            F[diag] += 1.0
        E = F
        for _ in range(s - 1):
            E = E @ F
        E *= math.exp(t * mu)
        self._expm = (key, E)
        return E

    _expm = None
    #: The row-space C step's centred Gram matrix (:func:`._row_space.centred_gram`).
    _row_gram = None

    def rescaled(self, coef, noise_scale):
        """The operator of ``coef * noise_scale V``: this one with both scalars replaced."""
        ratio = (coef * noise_scale) / (self.coef * self.noise_scale)
        out = copy.copy(self)
        out.coef, out.noise_scale, out.factor = coef, noise_scale, self.factor * ratio
        if self._trace is not None:
            out._trace = self._trace * ratio
        if self._matrix is not None:
            out._matrix = self._matrix * ratio
        out._expm = None
        return out

    def blend(self, previous, weight):
        """``(1 - weight) previous + weight self``, in place: a running average of estimates.

        Both must be compact, with the same ``coef`` and ``noise_scale``. The average of
        ``k`` independent minibatch estimates has the sampling error of one minibatch of
        ``k n`` rows.
        """
        self._expm = None
        self._matrix *= weight
        self._matrix += (1.0 - weight) * previous._matrix
        self._trace = weight * self._trace + (1.0 - weight) * previous._trace
        return self

    def matvec(self, v):
        """``coef * Sigma v``, shape (P,)."""
        if self._matrix is not None:
            return self._matrix @ v
        # (G'G - n g_bar g_bar') v = G'(u - mean(u)) with u = G v, since mean(u) = g_bar . v.
        u = self.grads.matvec(v)
        u -= np.add.reduce(u) / u.size
        out = self.grads.rmatvec(u)
        out *= self.factor
        return out

    def trace(self):
        """``tr(coef * Sigma)`` from the sum of squares of the per-example gradients, O(n P).

        Uses the operator's ``total_sum_of_squares()`` when it has one, else the sum of
        its per-coordinate ``sum_of_squares()``.
        """
        # Kept: an operator reused over several C steps (mCCAdL's sigma_refresh) computes it
        # once, and a chain pickled between them (joblib workers) keeps this value rather than
        # recomputing it by another formula (the operators drop their row-norm closures).
        if self._trace is None:
            # A model may offer the total alone (cheaper than the per-coordinate vector).
            total = getattr(self.grads, "total_sum_of_squares", None)
            ss = float(total()) if total is not None else float(self.grads.sum_of_squares().sum())
            self._trace = covariance_trace(self.factor, ss, self.n, float(self.g_bar @ self.g_bar))
        return self._trace

    def largest_eigenvalue(self, v, n_iter=1, rtol=0.05):
        """Power-iteration estimate of the largest ``|eigenvalue|``, warm-started from ``v``.

        ``v`` (unit norm) is updated in place towards the dominant eigenvector, so that
        successive iterations of a chain, whose ``Sigma`` changes slowly, need one product
        each. Runs up to ``n_iter`` products, stopping when the estimate changes by less
        than ``rtol``. Returns ``(lambda, n_products)``; the estimate is ``||A v||``.
        """
        lam = 0.0
        for i in range(n_iter):
            w = self.matvec(v)
            new = float(np.linalg.norm(w))
            if new == 0.0 or not np.isfinite(new):
                return 0.0, i + 1
            np.divide(w, new, out=v)
            if abs(new - lam) <= rtol * new:
                return new, i + 1
            lam = new
        return lam, n_iter


#: Largest number of parameters for which :meth:`NoiseCovariance.compact` forms ``coef * Sigma``
#: (8 MB in float64); the estimators whiten densely up to 1,000 parameters, where the chain
#: holds a ``P x P`` Cholesky factor anyway.
COMPACT_MAX_PARAMS = 1000

#: How many times faster a flop of a matrix-matrix product (the Gram matrix) runs than one of
#: the matrix-vector products and small numpy calls of a product through the rows: measured
#: 5-10 on a9a's minibatches (P = 124, n = 500; ``benchmarks/mccadl_throughput.py``).
_BLAS3_SPEEDUP = 6.0


def _compact_costs(grads):
    """Flops ``(per product through the rows, building the explicit matrix, per product with it)``,
    or None when the operator has no cheap dense Gram matrix (its ``gram_dims``)."""
    P = grads.n_params
    if P > COMPACT_MAX_PARAMS:
        return None
    dims = grads.gram_dims()
    if dims is None:
        return None
    n, p_in, dense_L = dims
    rows = 4.0 * n * p_in + (4.0 * P * P if dense_L else 2.0 * P)
    build = (2.0 * n * p_in * p_in + (4.0 * P**3 if dense_L else P * P)) / _BLAS3_SPEEDUP
    return rows, build, 2.0 * P * P


def c_step(
    p, grads, noise_scale, t, scale, tol=DEFAULT_TOL, eigvec=None, safety=1.25, cache=None, refresh=8, method="auto"
):
    """The C step ``p <- exp(t Sigma~) p`` with ``Sigma~ = -scale Sigma`` (mCCAdL eq. 17).

    For mCCAdL ``t = h`` and ``scale = (h/2) beta``; ``Sigma = noise_scale V`` of the
    per-example gradients ``grads``. The norm of the shifted ``Sigma^ = Sigma~ - mu~ I`` is
    ``scale * max(lambda_max - lambda_bar, lambda_bar - lambda_min)`` with
    ``lambda_bar = tr(Sigma)/N_d``, at most ``scale * max(lambda_max - lambda_bar,
    lambda_bar)``. It is first bounded by ``lambda_max <= tr(Sigma)`` (free, and a true
    bound); only if that bound needs more than one scaling step is ``lambda_max`` estimated
    by one warm-started power-iteration product (times ``safety``, since ``||Sigma v||``
    underestimates it), as Al-Mohy & Higham also select ``s`` from norm *estimates*; an
    underestimate is caught by :func:`expmv`'s term-growth check, which restarts with a
    larger norm, up to the trace bound.

    Parameters
    ----------
    p : ndarray of shape (P,)
    grads : PerExampleGradients or NoiseCovariance
        The minibatch whose covariance is ``V``; or a :class:`NoiseCovariance` built with
        ``coef=-scale`` and this ``noise_scale``, reused as it is (its mean and trace are
        then computed once for all the C steps that share it).
    noise_scale : float
    t, scale : float
    tol : float
    eigvec : ndarray of shape (P,) or None
        Warm-start vector of the power iteration, updated in place (all zeros: not yet
        started, then up to 20 products are spent once); ``None`` always uses the trace
        bound.
    safety : float, default=1.25
    cache : dict, optional
        Carries the ratio ``lambda_max / tr(Sigma)`` between calls (a chain's ``Sigma``
        changes slowly, and its scale moves with the minibatch's trace, which is free):
        the power-iteration product is then spent only every ``refresh`` calls, and in
        between the ratio times the current trace stands in for ``lambda_max``. The
        term-growth check covers a stale ratio that underestimates. Also counts the calls
        that went to Lanczos, under ``"n_lanczos"``.
    refresh : int, default=8
    method : {"auto", "taylor", "lanczos"}, default="auto"
        ``"taylor"``: the paper's scheme above. ``"lanczos"``: :func:`lanczos_expmv`.
        ``"auto"``: Taylor while it needs at most :data:`LANCZOS_FROM` products (it is exact
        to the requested backward error and cheapest for small ``||t Sigma~||``), Lanczos
        beyond, where its ``O(sqrt(||t Sigma~||))`` products win; and when the minibatch has
        fewer rows than parameters and its operator forms their Gram matrix (the DRBM's), the
        same exponential in the rows' ``n`` dimensions (:mod:`._row_space`): one product with
        ``Sigma``'s rows and ``n x n`` products, to the same backward error.

    Returns
    -------
    p : ndarray of shape (P,)
        A new array.
    n_products : int
        Products with ``Sigma``, norm estimation included.
    """
    P = p.size
    if isinstance(grads, NoiseCovariance):
        # Built by the caller and reused over several C steps; rescaled if built for another
        # scale (the same Sigma, damped more or less).
        cov = (
            grads if grads.coef == -scale and grads.noise_scale == noise_scale else grads.rescaled(-scale, noise_scale)
        )
    else:
        cov = NoiseCovariance(grads, noise_scale, -scale)
    if method == "auto" and not cov.is_compact and row_space_applies(cov, p):
        # Fewer rows than parameters (the DRBM): the same exponential in n dimensions, which
        # needs no trace (and returns NaN for a diverged chain as the check below does).
        return row_space_c_step(cov, t, p, tol, select_degree), 1
    tr = -cov.trace()  # tr(scale * Sigma) >= 0
    if not math.isfinite(tr):
        # The gradients are no longer finite: the chain has diverged, and its finiteness
        # check (which raises DivergenceError) should see it at once.
        return np.full_like(p, np.nan), 0
    if tr == 0.0 or t == 0.0:
        return p.copy(), 0
    if cov.is_compact and method == "auto":
        return cov.expm(t, tol) @ p, 1
    lam_bar = tr / P
    # lambda_max <= tr(Sigma): a true bound, and the norm's first estimate.
    bound = norm = trace_norm_bound(tr, P)
    n_est = 0
    # (m, s) is chosen once per call, here, and handed to expmv: select_degree was a
    # visible part of a C step that costs two products.
    degree = select_degree(abs(t) * norm, tol)
    if eigvec is not None and degree[1] > 1:
        cache = {} if cache is None else cache
        if cache.get("age", refresh) >= refresh:
            if not eigvec.any():
                eigvec[:] = np.random.default_rng(0).standard_normal(P)
                eigvec /= np.linalg.norm(eigvec)
                lam, n_est = cov.largest_eigenvalue(eigvec, n_iter=20)
            else:
                lam, n_est = cov.largest_eigenvalue(eigvec, n_iter=1)
            cache["ratio"], cache["age"] = lam / tr, 0
        else:
            lam = cache["ratio"] * tr
        cache["age"] += 1
        lam = min(safety * lam, tr)
        norm = max(lam - lam_bar, lam_bar)
        degree = select_degree(abs(t) * norm, tol)
    if method == "lanczos" or (method == "auto" and degree[0] * degree[1] > LANCZOS_FROM):
        if cache is not None:
            cache["n_lanczos"] = cache.get("n_lanczos", 0) + 1
        f, n_prod = lanczos_expmv(t, cov.matvec, p, tol)
        return f, n_prod + n_est
    f, n_prod = expmv(t, cov.matvec, p, -tr, norm, tol, norm_bound=bound, degree=degree)
    return f, n_prod + n_est


#: ``method="auto"`` switches from the Taylor series to Lanczos when the series would need
#: more products than this.
LANCZOS_FROM = 12
