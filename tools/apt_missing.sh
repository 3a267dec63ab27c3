# apt_missing.sh — sourced by tools/local_slurm.sh and tools/shared_fs.sh (not run on its own).
#
# install_missing WHO LOG PACKAGE...: install the Debian packages not installed yet with apt-get,
# quietly, its output in LOG; on failure print the log's tail and return 1 (WHO prefixes messages).
install_missing() {
    local who=$1 log=$2 missing=() p
    shift 2
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    ((${#missing[@]} == 0)) && return 0
    if ! command -v apt-get >/dev/null; then
        echo "$who: missing packages ${missing[*]} and no apt-get: install them with your package manager" >&2
        return 1
    fi
    echo "$who: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    # Stale package lists make the install fail with 404s; refresh only then.
    if ! apt-get install -y -q --no-install-recommends "${missing[@]}" >"$log" 2>&1; then
        apt-get update -q >>"$log" 2>&1
        if ! apt-get install -y -q --no-install-recommends "${missing[@]}" >>"$log" 2>&1; then
            tail -n 20 "$log" >&2
            echo "$who: apt-get install ${missing[*]} failed (log: $log)" >&2
            return 1
        fi
    fi
}
