#!/usr/bin/env bash
# A new user's first hour, measured: clone this repository (its HEAD commit) into a temporary
# directory, follow the README's "Set up" literally in a new virtual environment inside the clone
# (torch's CPU build first, then the demo command, then the test-suite command), and install the
# pre-commit hook with the real `pre-commit` into an environment of its own on a small repository.
# Prints the time of each step, the hook environment's size (target: well under 200 MB, the light
# install has no torch) and whether torch is in it.
#
#     flock /tmp/heavy.lock benchmarks/fresh_clone.sh [--keep]
#
# pip sees PyPI only: this machine's pip configuration (local indexes, wheel directories, caps) is
# switched off. The README takes torch from PyPI's CPU-build sibling, PyTorch's CPU wheel index
# (TORCH_INDEX_URL); where that index cannot be reached, TORCH_FIND_LINKS=/opt/wheels takes the same
# CPU build (torch==2.13.0+cpu) from a wheel directory instead, its dependencies still from PyPI.
set -euo pipefail
REPO=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
COMMIT=$(git -C "$REPO" rev-parse HEAD)
WORK=$(mktemp -d /tmp/npu-migrate-fresh-XXXXXX)
KEEP=${1:-}
trap '[ "$KEEP" = "--keep" ] || rm -rf "$WORK"' EXIT
export PIP_CONFIG_FILE=/dev/null PIP_DISABLE_PIP_VERSION_CHECK=1
unset PIP_FIND_LINKS PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_CONSTRAINT || true
TORCH_INDEX_URL=${TORCH_INDEX_URL:-https://download.pytorch.org/whl/cpu}

step() {  # step NAME COMMAND...: run it, print its wall time
  local name=$1; shift
  local start=$SECONDS
  if "$@" > "$WORK/$name.log" 2>&1; then
    printf '%-28s %5d s\n' "$name" $((SECONDS - start))
  else
    local rc=$?
    printf '%-28s %5d s  FAILED (exit %d), last lines of %s:\n' "$name" $((SECONDS - start)) "$rc" "$WORK/$name.log"
    tail -n 15 "$WORK/$name.log"
    return $rc
  fi
}

readme_command() {  # the README's command line that ends with $1
  grep -m1 -E -- "$1\$" "$WORK/clone/README.md"
}

echo "clone of $REPO at $COMMIT into $WORK"
step clone git clone -q --no-checkout "$REPO" "$WORK/clone"
git -C "$WORK/clone" checkout -q "$COMMIT"
cd "$WORK/clone"
DEMO=$(readme_command 'migrate demo')
TESTS=$(readme_command 'python3 -m pytest -q')
echo "README: $DEMO"
echo "README: $TESTS"

step venv python3 -m venv .venv
# shellcheck disable=SC1091
. .venv/bin/activate
if [ -n "${TORCH_FIND_LINKS:-}" ]; then
  step torch-cpu python3 -m pip install torch==2.13.0 --no-index --no-deps --find-links "$TORCH_FIND_LINKS"
else
  step torch-cpu python3 -m pip install torch==2.13.0 --index-url "$TORCH_INDEX_URL"
fi
step demo bash -c "$DEMO"
grep -E "case\(s\) passed|Python files scanned" "$WORK/demo.log" | sed 's/^/  demo: /'
step test-suite bash -c "$TESTS" || true
tail -n 1 "$WORK/test-suite.log" | sed 's/^/  tests: /'
echo "venv (.venv inside the clone): $(du -sm .venv | cut -f1) MB; torch $(python3 -c 'import torch; print(torch.__version__)')"
deactivate

# pre-commit: a small user repository whose config points at the clone; the hook gets its own environment
python3 -m venv "$WORK/pc-venv"
step pre-commit-install "$WORK/pc-venv/bin/python" -m pip install -q pre-commit
mkdir -p "$WORK/user" && cp -r "$WORK/clone/fixtures/demo/." "$WORK/user/"
cd "$WORK/user" && git init -q && git add -A && git -c user.name=n -c user.email=n@x commit -qm init
cat > .pre-commit-config.yaml <<EOF
repos:
  - repo: $WORK/clone
    rev: $COMMIT
    hooks:
      - id: npu-migrate-check
EOF
export PRE_COMMIT_HOME="$WORK/pc-home"
step hook-env-install "$WORK/pc-venv/bin/pre-commit" install-hooks
set +e
start=$SECONDS
"$WORK/pc-venv/bin/pre-commit" run --all-files > "$WORK/hook-run.log" 2>&1
rc=$?
set -e
printf '%-28s %5d s  (exit %d: the demo still has code to migrate, so the hook fails it)\n' hook-run $((SECONDS - start)) "$rc"
grep -E "Would change|Needs attention" "$WORK/hook-run.log" | sed 's/^/  hook: /' || true
env_dir=$(find "$PRE_COMMIT_HOME" -maxdepth 2 -type d -name 'py_env-*' | head -n 1)
echo "hook environment: $(du -sm "$PRE_COMMIT_HOME" | cut -f1) MB in $PRE_COMMIT_HOME ($(du -sm "$env_dir" | cut -f1) MB the Python environment)"
if "$env_dir/bin/python" -c "import torch" 2>/dev/null; then echo "  torch: INSTALLED in the hook environment"; else echo "  torch: not installed in the hook environment"; fi
"$env_dir/bin/python" -m pip list 2>/dev/null | awk 'NR > 2 {print $1}' | paste -sd' ' | sed 's/^/  packages: /'
