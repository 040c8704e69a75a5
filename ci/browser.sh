#!/usr/bin/env bash
# Headless Chromium for the HTML report test (tests/it/html_report.rs): Debian's `chromium`,
# installed with apt-get when it is missing and we may (root, or passwordless sudo). Never
# fails: without a browser it says "skipped: …" and the test says SKIPPED with the reason.
set -uo pipefail
for b in "${BITEXACT_CHROMIUM:-}" chromium chromium-browser google-chrome; do
    if [ -n "$b" ] && command -v "$b" >/dev/null 2>&1; then
        echo "browser: $("$b" --version 2>/dev/null | head -n 1)"
        exit 0
    fi
done
if ! command -v apt-get >/dev/null 2>&1; then
    echo "skipped: no chromium and no apt-get to install it (the HTML report test will say SKIPPED)"
    exit 0
fi
if [ "$(id -u)" = 0 ]; then
    as_root=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    as_root=(sudo -n)
else
    echo "skipped: no chromium, and installing it needs root or passwordless sudo (the HTML report test will say SKIPPED)"
    exit 0
fi
start=$(date +%s)
if DEBIAN_FRONTEND=noninteractive "${as_root[@]}" apt-get update -qq >/dev/null 2>&1 &&
    DEBIAN_FRONTEND=noninteractive "${as_root[@]}" apt-get install -y -qq --no-install-recommends chromium >/dev/null 2>&1; then
    echo "browser: $(chromium --version 2>/dev/null | head -n 1) (installed in $(($(date +%s) - start)) s)"
else
    echo "skipped: apt-get could not install chromium (the HTML report test will say SKIPPED)"
fi
exit 0
