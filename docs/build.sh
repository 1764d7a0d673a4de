#!/usr/bin/env bash
# Build the documentation with warnings as errors.
#   docs/build.sh           full-size gallery (minutes)
#   docs/build.sh --quick   gallery at reduced size (SKBAYES_SG_DOCS_QUICK=1), as CI does
# Needs: pip install ".[docs]"
set -euo pipefail
cd "$(dirname "$0")"
if [[ "${1:-}" == "--quick" ]]; then
    export SKBAYES_SG_DOCS_QUICK=1
    shift
fi
# Chains and BLAS threads would otherwise oversubscribe the cores.
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}" MPLBACKEND=Agg
exec python -m sphinx -W --keep-going -b html . _build/html "$@"
