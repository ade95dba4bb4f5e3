#!/usr/bin/env bash
# The README's screenshot of `keel memory --report`: ResNet50 at its largest batch on v3-8, drawn by
# headless Chromium (Debian's `chromium`, installed by hand for this alone: not a keel dependency),
# then reduced to a 256-colour palette so that the PNG stays small.
#   bench/memory_report_screenshot.sh [build/keel] [bench/figures/memory_report.png]
set -euo pipefail
keel="${1:-build/keel}"
png="${2:-bench/figures/memory_report.png}"
command -v chromium >/dev/null || { echo "needs chromium (apt-get install -y chromium)" >&2; exit 2; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$keel" memory --model resnet50 --input-shape 224x224x3 --classes 10 --device v3-8 --batch-per-core 203 \
  --report "$work/report.html" --trace "$work/trace.json"
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1200,1750 \
  --screenshot="$work/shot.png" "file://$work/report.html" 2>/dev/null
/usr/bin/python3 -c 'import sys; from PIL import Image
Image.open(sys.argv[1]).convert("RGB").quantize(256).save(sys.argv[2], optimize=True)' "$work/shot.png" "$png"
ls -l "$png"
