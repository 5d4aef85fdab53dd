#!/usr/bin/env bash
# Try nri-cpumgr on a local kind cluster: build the image, load it into the nodes, deploy
# deploy/ with kustomize, and run a Guaranteed pod to show the cpuset it got.
#
# Needs: docker (a running engine: kind nodes are containers), kind, kubectl, and root for
# scripts/build_image.sh (buildah). Not runnable on machines without a Docker engine.
#
#   deploy/kind/run.sh            create the cluster (if missing), deploy, run the demo pod
#   deploy/kind/run.sh delete     delete the cluster
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
CLUSTER=${CLUSTER:-nri-cpumgr}
IMAGE=nri-cpumgr:dev

if [ "${1:-}" = delete ]; then
  exec kind delete cluster --name "$CLUSTER"
fi
for tool in docker kind kubectl; do
  command -v "$tool" >/dev/null || { echo "run.sh: $tool is required" >&2; exit 1; }
done

if ! kind get clusters | grep -qx "$CLUSTER"; then
  kind create cluster --name "$CLUSTER" --config "$top/deploy/kind/cluster.yaml"
fi
ctx="kind-$CLUSTER"

archive=$("$top/scripts/build_image.sh" "$IMAGE")
kind load image-archive "$archive" --name "$CLUSTER"

kubectl --context "$ctx" apply -k "$top/deploy"
kubectl --context "$ctx" -n nri-cpumgr rollout status daemonset/nri-cpumgr --timeout=180s

# A Guaranteed pod with one whole CPU: it gets exclusive CPUs (not the first, reserved one);
# a BestEffort pod next to it stays on the shared pool.
kubectl --context "$ctx" apply -f - <<'YAML'
apiVersion: v1
kind: Pod
metadata:
  name: cpumgr-guaranteed
  namespace: default
spec:
  containers:
    - name: app
      image: docker.io/library/busybox:1.36
      command: ["sh", "-c", "grep Cpus_allowed_list /proc/self/status; sleep 3600"]
      resources:
        requests: {cpu: "1", memory: 64Mi}
        limits: {cpu: "1", memory: 64Mi}
---
apiVersion: v1
kind: Pod
metadata:
  name: cpumgr-besteffort
  namespace: default
spec:
  containers:
    - name: app
      image: docker.io/library/busybox:1.36
      command: ["sh", "-c", "grep Cpus_allowed_list /proc/self/status; sleep 3600"]
YAML
kubectl --context "$ctx" wait --for=condition=Ready pod/cpumgr-guaranteed pod/cpumgr-besteffort \
  --timeout=120s
for p in cpumgr-guaranteed cpumgr-besteffort; do
  printf '%-20s ' "$p"
  kubectl --context "$ctx" exec "$p" -- grep Cpus_allowed_list /proc/1/status
done

node=$(kubectl --context "$ctx" get pod cpumgr-guaranteed -o jsonpath='{.spec.nodeName}')
plugin=$(kubectl --context "$ctx" -n nri-cpumgr get pod -l app.kubernetes.io/name=nri-cpumgr \
  --field-selector "spec.nodeName=$node" -o name)
echo "--- nri-cpumgr status on $node"
kubectl --context "$ctx" -n nri-cpumgr exec "$plugin" -- \
  nri-cpumgr status --config /etc/nri-cpumgr/config.yaml
echo "--- metrics"
kubectl --context "$ctx" -n nri-cpumgr exec "$plugin" -- python3 -c \
  "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:9109/metrics').read().decode())" \
  | grep -E '^(cpu_manager|nri_cpumgr_nri_(connected|registered))'
