# Sourced by peft-venv.sh and trl-venv.sh: a virtual environment made from
# pinned, hash-checked requirements, made again only when they change.

# venv_current NAME VENV REQ: exits the script when VENV was made from REQ as
# it is now (its .stamp); else removes VENV, so that it is made afresh, and
# sets `stamp` for venv_done.
venv_current() {
  stamp=$(sha256sum "$3" | cut -c1-16)
  if [ -f "$2/.stamp" ] && [ "$(cat "$2/.stamp")" = "$stamp" ]; then
    echo "$1: $2 is up to date" >&2
    exit 0
  fi
  rm -rf "$2"
}

# venv_install VENV REQ PY [VENV OPTIONS...]: makes VENV with PY and installs
# REQ into it, --no-deps --require-hashes; a half-made VENV is removed.
venv_install() {
  local venv=$1 req=$2 py=$3
  shift 3
  trap 'rm -rf "'"$venv"'"' ERR
  "$py" -m venv "$@" "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check --no-deps --require-hashes -r "$req"
}

# venv_done VENV: marks VENV as made from the requirements venv_current read.
venv_done() {
  echo "$stamp" >"$1/.stamp"
  trap - ERR
}
