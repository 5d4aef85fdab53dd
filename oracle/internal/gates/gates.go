// Package gates holds what the two oracle commands share about the kubelet's feature gates.
package gates

import (
	utilfeature "k8s.io/apiserver/pkg/util/feature"
)

// WithDependents returns the gates with, for each gate turned off, every gate that depends on it
// (transitively, by the feature gate registry's own Dependencies) turned off too unless it is set:
// a kubelet configured with PodLevelResources: false refuses to start while
// PodLevelResourcesFixDefaulting and the other gates that depend on it keep their default (on),
// so an operator turns them off with it. The input map is not modified.
func WithDependents(gates map[string]bool) map[string]bool {
	deps := utilfeature.DefaultMutableFeatureGate.Dependencies()
	out := map[string]bool{}
	for k, v := range gates {
		out[k] = v
	}
	for changed := true; changed; {
		changed = false
		for f, on := range deps {
			if _, set := out[string(f)]; set {
				continue
			}
			for _, d := range on {
				if v, set := out[string(d)]; set && !v {
					out[string(f)] = false
					changed = true
					break
				}
			}
		}
	}
	return out
}
