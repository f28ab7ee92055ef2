# Sourced by bin/quickstart and bin/test: what a fresh Debian or Ubuntu machine lacks, and the
# virtualenv both make. As root the missing distribution packages are installed with apt-get
# (as bin/test already did for PostgreSQL); as an ordinary user the one command to run is
# printed and the script stops, having changed nothing.

# kiln_install WHO PACKAGE...: install the packages as root, else print the command and exit 1.
kiln_install() {
    local who=$1
    shift
    [ $# -gt 0 ] || return 0
    if [ "$(id -u)" != 0 ]; then
        echo "$who: this machine lacks $*; as root run:  apt-get install -y $*" >&2
        echo "$who: (then run $who again)" >&2
        exit 1
    fi
    echo "$who: installing $* from the distribution (apt-get)" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q --no-install-recommends "$@" >/dev/null 2>&1 ||
        { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends "$@" \
            >/dev/null; } ||
        { echo "$who: apt-get could not install $*" >&2; exit 1; }
}

# kiln_require WHO COMMAND:PACKAGE...: install the packages of the commands not on PATH.
kiln_require() {
    local who=$1 pair missing=()
    shift
    for pair in "$@"; do
        command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair#*:}")
    done
    kiln_install "$who" "${missing[@]}"
}

# kiln_venv_ok VENV PYTHON: whether VENV is a whole virtualenv of PYTHON with a working pip.
kiln_venv_ok() {
    local venv=$1 python=$2 home
    [ -x "$venv/bin/python" ] && [ -f "$venv/pyvenv.cfg" ] || return 1
    home=$(dirname "$(readlink -f "$python")")
    grep -qx "home = $home" "$venv/pyvenv.cfg" || return 1
    "$venv/bin/python" -m pip --version >/dev/null 2>&1
}

# kiln_venv WHO VENV PYTHON: make VENV from PYTHON unless a whole one is there; a half-made
# one (an interrupted run, a missing python3.X-venv package, another interpreter) is made
# again; the distribution's venv package is installed first when PYTHON cannot make one.
kiln_venv() {
    local who=$1 venv=$2 python=$3 minor
    kiln_venv_ok "$venv" "$python" && return 0
    if [ -e "$venv" ]; then
        echo "$who: $venv is not a whole virtualenv of $python: making it again" >&2
        rm -rf "$venv"
    fi
    [ -x "$python" ] || { echo "$who: no Python at $python (apt-get install python3)" >&2; exit 1; }
    if ! "$python" -m venv "$venv" >/dev/null 2>&1; then
        rm -rf "$venv"
        minor=$("$python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
        kiln_install "$who" "python$minor-venv"
        "$python" -m venv "$venv" || { rm -rf "$venv"; exit 1; }
    fi
}
