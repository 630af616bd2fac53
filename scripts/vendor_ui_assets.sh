#!/usr/bin/env bash
# Re-fetch the dashboard's and the API docs' browser assets from the npm registry into
# app/ui/static/vendor/ (committed, so that nothing is fetched at run time). Pinned versions;
# each package's licence travels with its files.
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=app/ui/static/vendor
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

fetch() {  # package@version -> unpacked in $WORK/<name>
    local spec=$1 name=${1%@*}
    (cd "$WORK" && npm pack --silent "$spec" >/dev/null)
    mkdir -p "$WORK/$name"
    tar xzf "$WORK/${name}-${spec##*@}.tgz" -C "$WORK/$name" --strip-components=1
}

fetch uplot@1.6.32
fetch swagger-ui-dist@5.35.0
fetch redoc@2.5.4

rm -rf "$DEST" && mkdir -p "$DEST/uplot" "$DEST/swagger-ui" "$DEST/redoc"
cp "$WORK/uplot/dist/uPlot.iife.min.js" "$WORK/uplot/dist/uPlot.min.css" "$WORK/uplot/LICENSE" \
    "$DEST/uplot/"
cp "$WORK/swagger-ui-dist/"{swagger-ui-bundle.js,swagger-ui-bundle.js.LICENSE.txt,swagger-ui.css} \
    "$WORK/swagger-ui-dist/"{LICENSE,NOTICE,favicon-32x32.png} "$DEST/swagger-ui/"
cp "$WORK/redoc/bundles/"{redoc.standalone.js,redoc.standalone.js.LICENSE.txt} \
    "$WORK/redoc/LICENSE" "$DEST/redoc/"
# the bundles name source maps that are not shipped; drop the references
sed -i '/^\/\/# sourceMappingURL=/d' "$DEST"/*/*.js
sed -i 's|/\*# sourceMappingURL=[^*]*\*/||' "$DEST"/*/*.css
# ReDoc's attribution logo is fetched from its CDN: point it at an empty inline image instead
sed -i 's|https://cdn.redoc.ly/redoc/logo-mini.svg|data:image/svg+xml,%3Csvg xmlns=%27http://www.w3.org/2000/svg%27/%3E|' \
    "$DEST/redoc/redoc.standalone.js"
for pkg in uplot@1.6.32 swagger-ui-dist@5.35.0 redoc@2.5.4; do echo "$pkg"; done > "$DEST/VERSIONS"
echo "vendored into $DEST:"; du -sh "$DEST"/*
