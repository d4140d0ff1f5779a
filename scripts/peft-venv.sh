#!/usr/bin/env bash
# make peft-venv: the Python environment of the PEFT interop checks
# (train's TestRealModelsPEFTReadBack runs scripts/peft_readback.py in it).
#
# build/peft-venv sees Debian's python3-torch (1.13, CPU: the package
# index's torch wheels need CUDA's libraries, gigabytes, even to import) and
# holds the pinned packages of scripts/peft-requirements.txt, each checked
# by its sha256. As root on Debian the system packages are installed;
# otherwise the command to run is printed.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=build/peft-venv
req=scripts/peft-requirements.txt
py=/usr/bin/python3
debs="python3-torch python3-venv python3-requests python3-yaml python3-psutil"

if ! "$py" -c 'import torch, requests, yaml, psutil, venv' 2>/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "peft-venv: installing $debs from Debian's packages" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $debs >/dev/null
  else
    echo "peft-venv needs Debian's $debs: install them (for example: sudo apt-get install $debs)" >&2
    exit 1
  fi
fi

# Made again when the requirements change; a half-made one is removed.
. scripts/venv-lib.sh
venv_current peft-venv "$venv" "$req"
venv_install "$venv" "$req" "$py" --system-site-packages
"$venv/bin/python" -c 'import torch, transformers, peft, gguf; print("peft-venv: torch", torch.__version__, "transformers", transformers.__version__, "peft", peft.__version__)' >&2
venv_done "$venv"
