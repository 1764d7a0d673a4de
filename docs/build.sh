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
python -m sphinx -W --keep-going -b html . _build/html "$@"
# The docs must read offline (issue 18): no page may load a script or stylesheet from the
# network, and the maths must be rendered by the MathJax copied into _static.
python - <<'PY'
import pathlib, re, sys
html = pathlib.Path("_build/html")
remote = re.compile(r'<(?:script|link)[^>]+(?:src|href)="(?:https?:)?//[^"]+"')
bad = [(str(p), m.group(0)) for p in html.rglob("*.html") for m in remote.finditer(p.read_text(errors="ignore"))]
mathjax = html / "_static" / "mathjax" / "tex-chtml.js"
if bad or not mathjax.exists():
    for page, tag in bad[:10]:
        print(f"{page}: loads {tag}", file=sys.stderr)
    if not mathjax.exists():
        print(f"{mathjax} is missing: MathJax would come from a CDN", file=sys.stderr)
    sys.exit(f"docs: {len(bad)} remote script/stylesheet references; the docs must work offline")
print("docs: no remote scripts or stylesheets; MathJax served locally")
PY
