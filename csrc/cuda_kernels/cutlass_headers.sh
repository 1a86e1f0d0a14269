# Sourced by build.sh and build_sm100.sh: the pinned CUTLASS header source, in one place.
# Needs ROOT and PYTHON set; sets CUTLASS_DIR (default: $ROOT/.deps/cutlass_library/source), downloading
# the nvidia-cutlass wheel's headers into $ROOT/.deps when they are missing (needs network).
CUTLASS_VERSION="4.2.0.0"
CUTLASS_DIR="${CUTLASS_DIR:-$ROOT/.deps/cutlass_library/source}"
if [ ! -f "$CUTLASS_DIR/include/cutlass/cutlass.h" ]; then
  echo "CUTLASS headers not in $CUTLASS_DIR; downloading nvidia-cutlass==$CUTLASS_VERSION into $ROOT/.deps" >&2
  mkdir -p "$ROOT/.deps"
  "$PYTHON" -m pip download -q --no-deps "nvidia-cutlass==$CUTLASS_VERSION" -d "$ROOT/.deps"
  "$PYTHON" - "$ROOT/.deps" "nvidia_cutlass-$CUTLASS_VERSION-py3-none-any.whl" <<'PYEOF'
import sys, zipfile
deps, wheel = sys.argv[1], sys.argv[2]
keep = ("cutlass_library/source/include/", "cutlass_library/source/tools/util/include/")
with zipfile.ZipFile(f"{deps}/{wheel}") as z:  # headers only (no unzip needed)
    z.extractall(deps, [n for n in z.namelist() if n.startswith(keep)])
PYEOF
  CUTLASS_DIR="$ROOT/.deps/cutlass_library/source"
fi
