#!/usr/bin/env bash
# Print the Debian mirror lines apt on this machine already uses for CODENAME, one-line format
# ("deb URI SUITE COMPONENTS"), for mmdebstrap: CODENAME itself first, then CODENAME-updates and
# CODENAME-security where apt has them. Reads /etc/apt/sources.list and
# /etc/apt/sources.list.d/*.list / *.sources (deb822), the files apt reads; other suites (a
# vendor's "cloud-sdk-bookworm", "nodistro") are left out. Exit 1 if CODENAME has no mirror.
#
#   debian-sources.sh bookworm
set -euo pipefail

codename="${1:?usage: debian-sources.sh CODENAME}"
root="${APT_ROOT:-}"  # tests point this at a scratch tree

files=()
[ -f "$root/etc/apt/sources.list" ] && files+=("$root/etc/apt/sources.list")
for f in "$root"/etc/apt/sources.list.d/*.list "$root"/etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] && files+=("$f")
done
[ "${#files[@]}" -gt 0 ] || { echo "debian-sources: no apt sources under $root/etc/apt" >&2; exit 1; }

# One "URI SUITE COMPONENTS..." line per (deb entry, suite), from either format.
entries() {
    local f
    for f in "${files[@]}"; do
        case "$f" in
            *.sources)
                # deb822 stanzas, blank-line separated; fields Types, URIs, Suites, Components, Enabled
                awk 'function flush() {
                         if (types ~ /(^| )deb( |$)/ && enabled != "no")
                             for (u = 1; u <= nu; u++) for (s = 1; s <= ns; s++) print uri[u], suite[s], comps
                         types = ""; enabled = ""; comps = ""; nu = 0; ns = 0
                     }
                     /^[ \t]*#/ { next }
                     /^[ \t]*$/ { flush(); next }
                     { key = tolower($1); sub(/:$/, "", key); $1 = ""; sub(/^ +/, "") }
                     key == "types" { types = $0 }
                     key == "enabled" { enabled = tolower($0) }
                     key == "uris" { nu = split($0, uri, " ") }
                     key == "suites" { ns = split($0, suite, " ") }
                     key == "components" { comps = $0 }
                     END { flush() }' "$f"
                ;;
            *)
                # deb [options] URI SUITE COMPONENTS...
                sed -e 's/#.*//' -e 's/\[[^]]*\]//' "$f" | awk '$1 == "deb" && NF >= 3 { $1 = ""; sub(/^ +/, ""); print }'
                ;;
        esac
    done
}

all="$(entries)"
for suite in "$codename" "$codename-updates" "$codename-security"; do
    line="$(awk -v s="$suite" '$2 == s { print; exit }' <<< "$all")"
    if [ -n "$line" ]; then
        set -- $line
        uri="$1" comps="${*:3}"
        echo "deb $uri $suite ${comps:-main}"
    elif [ "$suite" = "$codename" ]; then
        echo "debian-sources: apt has no mirror for $codename (looked in: ${files[*]})" >&2
        exit 1
    fi
done
