#!/usr/bin/env bash
# The newcomer's path, proved in a new, empty virtual environment:
#   install the package (no extras, not editable) -> start app.py -> one synthesis through the
#   app with gradio_client -> `lab synth` and `lab eval` from a directory outside the checkout.
# A dependency missing from pyproject.toml, or a preset not shipped as package data, fails here
# even when the developer's own environment happens to have it.
#
#   bash scripts/fresh_env_check.sh          # PYTHON=python3.11 to pick the interpreter,
#                                            # KEEP_FRESH_ENV=1 to keep the venv and logs
# Only 127.0.0.1 is contacted besides the package indexes pip is configured with; pip's cache
# is kept, so a second run installs from it.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-python3}
TEXT="The quick brown fox jumps over the lazy dog."
START=$SECONDS

WORK=$(mktemp -d "${TMPDIR:-/tmp}/lab-fresh-env.XXXXXX")
VENV=$WORK/venv
APP_PID=

section() { printf '\n==== [fresh env %4ds] %s ====\n' "$((SECONDS - START))" "$*"; }

stop_app() {
    [ -n "$APP_PID" ] || return 0
    if kill -0 "$APP_PID" 2>/dev/null; then
        kill "$APP_PID" 2>/dev/null || true
        for _ in $(seq 20); do kill -0 "$APP_PID" 2>/dev/null || break; sleep 0.5; done
        kill -9 "$APP_PID" 2>/dev/null || true
    fi
    wait "$APP_PID" 2>/dev/null || true
    APP_PID=
}

cleanup() {
    local rc=$?
    stop_app
    if [ "$rc" -ne 0 ]; then
        if [ -s "$WORK/app.log" ]; then
            echo "---- app log (last 60 lines) ----"
            tail -n 60 "$WORK/app.log"
        fi
        echo "FRESH ENV CHECK FAILED (rc=$rc) after $((SECONDS - START)) s"
    fi
    if [ -n "${KEEP_FRESH_ENV:-}" ]; then echo "kept $WORK"; else rm -rf "$WORK"; fi
    echo "fresh environment check: $((SECONDS - START)) s wall, clean-up included"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Nothing from the caller's environment may stand in for what the package declares.
unset PYTHONPATH PYTHONHOME VIRTUAL_ENV
export GRADIO_ANALYTICS_ENABLED=False HF_HUB_DISABLE_TELEMETRY=1
export NO_PROXY=127.0.0.1,localhost no_proxy=127.0.0.1,localhost

section "new empty venv ($("$PYTHON" --version 2>&1)) in $VENV"
"$PYTHON" -m venv "$VENV"
VPY=$VENV/bin/python

section "install torch, as the Makefile does"
# Same choice as `make install`: CPU build without an NVIDIA driver, default build with one.
if command -v nvidia-smi >/dev/null; then TORCH=torch; else TORCH="torch==2.13.0"; fi
timeout 1200 "$VPY" -m pip install --quiet --no-compile "$TORCH"

section "install the package (non-editable, no extras)"
# From a copy of the files git would commit (tracked + untracked-not-ignored), so the build
# writes no build/ or *.egg-info into the checkout and no stale build/lib leaks into the wheel.
mkdir "$WORK/src"
(cd "$ROOT" && git ls-files -z --cached --others --exclude-standard \
    | tar --null --ignore-failed-read -T - -cf - 2>/dev/null) | tar -xf - -C "$WORK/src"
timeout 1200 "$VPY" -m pip install --quiet --no-compile "$WORK/src"
"$VPY" -m pip check

section "start app.py on a free loopback port"
PORT=$("$VPY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
URL=http://127.0.0.1:$PORT/
mkdir "$WORK/data" "$WORK/run"
# `python app.py` would put the script's directory, the checkout, on sys.path; PYTHONSAFEPATH=1
# (Python 3.11+) leaves it off, so the app runs on the installed package and its package data
# (presets, sentence sets), as an installed lab does. Run from a scratch directory so relative
# paths (runs/) never land in the checkout.
(cd "$WORK/run" && PYTHONSAFEPATH=1 exec timeout -k 10 900 "$VPY" "$ROOT/app.py" \
    --port "$PORT" --data-dir "$WORK/data" --no-warm >"$WORK/app.log" 2>&1) &
APP_PID=$!
echo "app pid $APP_PID, waiting up to 180 s for HTTP 200 at $URL"
"$VPY" - "$URL" "$APP_PID" <<'EOF'
import sys, time, urllib.request

url, pid = sys.argv[1], int(sys.argv[2])
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
deadline = time.monotonic() + 180
while time.monotonic() < deadline:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            alive = stat.read().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        alive = False
    if not alive:
        sys.exit("FAIL: the app exited before it served a page")
    try:
        with opener.open(url, timeout=5) as reply:
            if reply.status == 200:
                print(f"HTTP 200 after {180 - (deadline - time.monotonic()):.0f} s")
                sys.exit(0)
    except OSError:
        pass
    time.sleep(1)
sys.exit("FAIL: no HTTP 200 within 180 s")
EOF

section "one synthesis through the app (gradio_client)"
mkdir "$WORK/client"
timeout 420 "$VPY" "$ROOT/scripts/fresh_env_client.py" synth "$URL" "$WORK/client" "$TEXT"
stop_app

section "lab synth + lab eval from outside the checkout"
mkdir "$WORK/cli"
cd "$WORK/cli"
timeout 300 "$VENV/bin/lab" synth "$TEXT" -o out.wav
"$VPY" "$ROOT/scripts/fresh_env_client.py" check out.wav "$TEXT"
timeout 300 "$VENV/bin/lab" eval out.wav --text "$TEXT"
cd "$ROOT"

section "PASSED: the fresh environment check took $((SECONDS - START)) s"
