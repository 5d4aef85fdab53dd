#!/usr/bin/env bash
# make chart: the Helm chart deploy/helm/nri-cpumgr as a chart repository: `helm package` into
# $OUT (default build/charts) and `helm repo index` there (index.yaml; URLs relative to the
# index, or under $CHART_URL when set). Serve that directory over HTTP and
#   helm repo add nri-cpumgr http://HOST:PORT/ && helm install nri-cpumgr nri-cpumgr/nri-cpumgr ...
# (docs/operations/quick-start.md). helm is the modern build's (scripts/modern/build.sh helm,
# built when missing) unless $HELM names another. Helm's own config and cache stay in a
# temporary directory.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ -z "${HELM:-}" ]]; then
    dir=$(bash scripts/modern/build.sh --print helm 2>/dev/null) || {
        bash scripts/modern/build.sh helm >/dev/null
        dir=$(bash scripts/modern/build.sh --print helm)
    }
    HELM="$dir/helm"
fi
out=${OUT:-build/charts}
mkdir -p "$out"
home=$(mktemp -d)
trap 'rm -rf "$home"' EXIT
export HELM_CACHE_HOME="$home/cache" HELM_CONFIG_HOME="$home/config" HELM_DATA_HOME="$home/data"
"$HELM" package deploy/helm/nri-cpumgr --destination "$out"
"$HELM" repo index "$out" ${CHART_URL:+--url "$CHART_URL"}
echo "chart repository: $out (index.yaml)"
