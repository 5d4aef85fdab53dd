// Command kubelet-checkpoint writes the kubelet's CPU and Memory Manager checkpoints
// (cpu_manager_state, memory_manager_state) with the kubelet's own state packages
// (k8s.io/kubernetes/pkg/kubelet/cm/cpumanager/state and .../memorymanager/state), for the
// adoption tests of the plugin (nri_cpumgr/adopt): test vectors written by the kubelet's code,
// not by ours.
//
// Usage: kubelet-checkpoint -dir DIR [-cpu-format current|v3|v2] [-memory-format current|v2|v1] < assignments.json
//
// Input, JSON on stdin (the kubelet's own JSON shapes):
//
//	{"cpu": {"policyName": "static", "defaultCpuSet": "0,7",
//	         "entries": {"<pod uid>": {"<container>": "1-2"}},
//	         "podEntries": {"<pod uid>": "3-6"},                  // pod-level bubbles
//	         "baselines": {"<pod uid>": {"<container>": "1-4"}}}, // admission-time CPUs (resized)
//	 "memory": {"policyName": "Static", "machineState": <state.NUMANodeMap>,
//	            "entries": <state.ContainerMemoryAssignments>,
//	            "podEntries": {"<pod uid>": [<state.Block>, ...]}}}
//
// Formats: "current" is what this kubelet release writes (its NewCheckpointState and setters,
// with PodLevelResources, PodLevelResourceManagers, InPlacePodVerticalScaling and
// InPlacePodVerticalScalingExclusiveCPUs on, so pod-level entries and baselines are kept).
// The older formats are this release's own types for them (CPUManagerCheckpointV3/V2,
// MemoryManagerCheckpointV2/V1) written through the checkpoint manager: the formats the
// kubelets of earlier releases write (v3/v2: v1.36 with PodLevelResourceManagers on; v2/v1:
// v1.35, v1.36 with the gate off). Prints the kubelet release on stdout.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"

	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/kubelet/checkpointmanager"
	cpustate "k8s.io/kubernetes/pkg/kubelet/cm/cpumanager/state"
	memstate "k8s.io/kubernetes/pkg/kubelet/cm/memorymanager/state"
	"k8s.io/utils/cpuset"

	"nri-cpumgr/oracle/internal/gates"
)

var version = "unknown"

type cpuInput struct {
	PolicyName    string                       `json:"policyName"`
	DefaultCPUSet string                       `json:"defaultCpuSet"`
	Entries       map[string]map[string]string `json:"entries"`
	PodEntries    map[string]string            `json:"podEntries"`
	Baselines     map[string]map[string]string `json:"baselines"`
}

type memoryInput struct {
	PolicyName   string                              `json:"policyName"`
	MachineState memstate.NUMANodeMap                `json:"machineState"`
	Entries      memstate.ContainerMemoryAssignments `json:"entries"`
	PodEntries   map[string][]memstate.Block         `json:"podEntries"`
}

type input struct {
	CPU    *cpuInput    `json:"cpu"`
	Memory *memoryInput `json:"memory"`
}

const (
	cpuName    = "cpu_manager_state"
	memoryName = "memory_manager_state"
)

func main() {
	dir := flag.String("dir", "", "directory to write the checkpoints into")
	cpuFormat := flag.String("cpu-format", "current", "current | v3 | v2")
	memFormat := flag.String("memory-format", "current", "current | v2 | v1")
	flag.Parse()
	if *dir == "" {
		fail(fmt.Errorf("-dir is required"))
	}
	var in input
	dec := json.NewDecoder(os.Stdin)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		fail(fmt.Errorf("input: %w", err))
	}
	on := gates.WithDependents(map[string]bool{
		"PodLevelResources":                      true,
		"PodLevelResourceManagers":               true,
		"InPlacePodVerticalScaling":              true,
		"InPlacePodVerticalScalingExclusiveCPUs": true,
	})
	if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(on); err != nil {
		fail(err)
	}
	if in.CPU != nil {
		if err := writeCPU(*dir, *cpuFormat, in.CPU); err != nil {
			fail(fmt.Errorf("cpu: %w", err))
		}
	}
	if in.Memory != nil {
		if err := writeMemory(*dir, *memFormat, in.Memory); err != nil {
			fail(fmt.Errorf("memory: %w", err))
		}
	}
	fmt.Println(version)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "kubelet-checkpoint:", err)
	os.Exit(1)
}

func parse(s string) cpuset.CPUSet {
	c, err := cpuset.Parse(s)
	if err != nil {
		fail(err)
	}
	return c
}

func writeCPU(dir, format string, in *cpuInput) error {
	switch format {
	case "current":
		_ = os.Remove(dir + "/" + cpuName) // NewCheckpointState restores an existing one
		s, err := cpustate.NewCheckpointState(klog.Background(), dir, cpuName, in.PolicyName, nil)
		if err != nil {
			return err
		}
		s.SetDefaultCPUSet(parse(in.DefaultCPUSet))
		for pod, conts := range in.Entries {
			for name, cpus := range conts {
				s.SetCPUSet(pod, name, parse(cpus))
			}
		}
		for pod, cpus := range in.PodEntries {
			s.SetPodCPUSet(pod, parse(cpus))
		}
		if len(in.Baselines) > 0 {
			b := s.GetCPUBaselines() // SetCPUSet recorded every entry as its own baseline
			for pod, conts := range in.Baselines {
				if b[pod] == nil {
					b[pod] = map[string]cpustate.ContainerCPUBaseline{}
				}
				for name, cpus := range conts {
					b[pod][name] = cpustate.ContainerCPUBaseline{Baseline: parse(cpus)}
				}
			}
			s.SetCPUBaselines(b)
		}
		return nil
	case "v3":
		if len(in.Baselines) > 0 {
			return fmt.Errorf("the v3 format has no baselines")
		}
		cp := &cpustate.CPUManagerCheckpointV3{PolicyName: in.PolicyName,
			DefaultCPUSet: in.DefaultCPUSet, Entries: in.Entries,
			PodEntries: cpustate.PodCPUAssignments{}}
		for pod, cpus := range in.PodEntries {
			cp.PodEntries[pod] = cpustate.PodEntry{CPUSet: parse(cpus)}
		}
		return create(dir, cpuName, cp)
	case "v2":
		if len(in.Baselines) > 0 || len(in.PodEntries) > 0 {
			return fmt.Errorf("the v2 format has no pod entries nor baselines")
		}
		return create(dir, cpuName, &cpustate.CPUManagerCheckpointV2{PolicyName: in.PolicyName,
			DefaultCPUSet: in.DefaultCPUSet, Entries: in.Entries})
	}
	return fmt.Errorf("unknown format %q", format)
}

func writeMemory(dir, format string, in *memoryInput) error {
	switch format {
	case "current":
		_ = os.Remove(dir + "/" + memoryName)
		s, err := memstate.NewCheckpointState(klog.Background(), dir, memoryName, in.PolicyName)
		if err != nil {
			return err
		}
		s.SetMachineState(in.MachineState)
		for pod, conts := range in.Entries {
			for name, blocks := range conts {
				s.SetMemoryBlocks(pod, name, blocks)
			}
		}
		for pod, blocks := range in.PodEntries {
			s.SetPodMemoryBlocks(pod, blocks)
		}
		return nil
	case "v2":
		cp := &memstate.MemoryManagerCheckpointV2{PolicyName: in.PolicyName,
			MachineState: in.MachineState, Entries: in.Entries,
			PodEntries: memstate.PodMemoryAssignments{}}
		for pod, blocks := range in.PodEntries {
			cp.PodEntries[pod] = memstate.PodEntry{MemoryBlocks: blocks}
		}
		return create(dir, memoryName, cp)
	case "v1":
		if len(in.PodEntries) > 0 {
			return fmt.Errorf("the v1 format has no pod entries")
		}
		return create(dir, memoryName, &memstate.MemoryManagerCheckpointV1{
			PolicyName: in.PolicyName, MachineState: in.MachineState, Entries: in.Entries})
	}
	return fmt.Errorf("unknown format %q", format)
}

func create(dir, name string, cp checkpointmanager.Checkpoint) error {
	m, err := checkpointmanager.NewCheckpointManager(dir)
	if err != nil {
		return err
	}
	return m.CreateCheckpoint(name, cp)
}
