#!/usr/bin/env bash
# Installs real documents nobody on this project made, for tests/documents/test_real_documents.py,
# tests/documents/test_real_formats.py and benchmarks/documents_bench.py: Debian manuals as PDF, EPUB and HTML
# (LaTeX, DocBook and Sphinx made), R packages' example spreadsheets, Word and PowerPoint files (readxl,
# openxlsx, officer), nbsphinx's documentation notebooks, LibreOffice's own example ODT, and poppler-utils
# (`pdftotext`, the reference reading of a PDF).
# Idempotent and quiet. The R packages would pull R itself in (and LibreOffice a desktop), so their .deb
# files are only unpacked (`apt-get download` + `dpkg-deb -x`) under $RLM_REAL_DOCUMENTS (default
# /opt/rlm-real-documents); of libreoffice-common, only its example document and a CV template are kept.
# A package that cannot be had is said; the tests that need it skip, naming it.
set -u
say() { echo "[setup_documents] $*"; }
LOG=/tmp/setup_documents_apt.log
UNPACKED="${RLM_REAL_DOCUMENTS:-/opt/rlm-real-documents}"
# Manuals with no dependencies: debmake-doc (PDF, EPUB; DocBook via LaTeX), developers-reference (PDF,
# EPUB, HTML; Sphinx), r-doc-pdf (R's manuals; texinfo), gnuplot-doc and asymptote-doc (LaTeX, tables),
# libtasn1-doc (texinfo).
MANUALS="poppler-utils debmake-doc developers-reference r-doc-pdf gnuplot-doc asymptote-doc libtasn1-doc"
# package, or package:path,path (only those files of it)
UNPACK="r-cran-readxl r-cran-openxlsx r-cran-officer python-nbsphinx-doc
libreoffice-common:./usr/lib/libreoffice/share/template/common/internal/idxexample.odt,./usr/lib/libreoffice/share/template/common/personal/CV.ott"
updated=0
apt_update() { [ "$updated" = 1 ] || { apt-get update -qq >>"$LOG" 2>&1; updated=1; }; }

missing=""
for package in $MANUALS; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "ok installed" || missing="$missing $package"
done
if [ -n "$missing" ]; then
    # Without a fresh index first (fast), then with one.
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >"$LOG" 2>&1 || {
        apt_update
        for package in $missing; do
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$package" >>"$LOG" 2>&1 \
                || say "could not install $package (see $LOG)"
        done
    }
fi

mkdir -p "$UNPACKED"
for entry in $UNPACK; do
    package=${entry%%:*}
    only=${entry#"$package"}; only=${only#:}
    [ -f "$UNPACKED/$package.done" ] && continue
    work=$(mktemp -d)
    if (cd "$work" && { apt-get download -qq "$package" >>"$LOG" 2>&1 || { apt_update; apt-get download -qq "$package" >>"$LOG" 2>&1; }; }); then
        if [ -n "$only" ]; then
            dpkg-deb --fsys-tarfile "$work"/"$package"_*.deb | tar -x -C "$UNPACKED" ${only//,/ } && touch "$UNPACKED/$package.done"
        else
            dpkg-deb -x "$work"/"$package"_*.deb "$UNPACKED" && touch "$UNPACKED/$package.done"
        fi
    else
        say "could not download $package (see $LOG)"
    fi
    rm -rf "$work"
done
exit 0
