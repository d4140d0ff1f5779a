#!/usr/bin/env bash
# trl-venv: the Python environment of the TRL comparison (issue 39;
# scripts/trl_grpo.py runs TRL's GRPOTrainer in it).
#
# build/trl-venv is a plain venv of /usr/bin/python3 (3.11), without
# Debian's python3-torch 1.13, holding the pinned packages of
# scripts/trl-requirements.txt, each checked by its sha256: the package
# index's current torch with its own MKL and oneDNN (linked into
# libtorch_cpu.so), transformers, trl, peft, accelerate, math-verify and
# threadpoolctl. The index's torch is a CUDA build that needs eleven nvidia-*
# wheels just to import (see the requirements' header): about 3 GB to
# download, and the venv takes 4.5 GB of disk (3.3 GB of it nvidia-*).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=build/trl-venv
req=scripts/trl-requirements.txt
py=/usr/bin/python3

if ! "$py" -c 'import sys, venv, ensurepip; assert sys.version_info[:2] == (3, 11)' 2>/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "trl-venv: installing python3-venv from Debian's packages" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
  fi
  "$py" -c 'import sys, venv, ensurepip; assert sys.version_info[:2] == (3, 11)' || {
    echo "trl-venv needs $py 3.11 with venv (Debian's python3-venv); the hashes in $req are for CPython 3.11" >&2
    exit 1
  }
fi

# Made again when the requirements change; a half-made one is removed.
. scripts/venv-lib.sh
venv_current trl-venv "$venv" "$req"
venv_install "$venv" "$req" "$py"
"$venv/bin/python" -W ignore - >&2 <<'EOF'
import torch, transformers, trl, peft, accelerate, math_verify, threadpoolctl, gguf
from importlib.metadata import version
print("trl-venv: torch", torch.__version__, "transformers", transformers.__version__,
      "trl", trl.__version__, "peft", peft.__version__, "accelerate", accelerate.__version__,
      "math-verify", version("math-verify"), "threadpoolctl", threadpoolctl.__version__)
print("trl-venv: MKL", torch.backends.mkl.is_available(), "oneDNN", torch.backends.mkldnn.is_available(),
      "CPU capability", torch.backends.cpu.get_cpu_capability())
EOF
venv_done "$venv"
echo "trl-venv: $venv: $(du -sh "$venv" | cut -f1)" >&2
