// Command kubelet-oracle runs scenarios through the kubelet's own CPU manager (static
// policy), Topology Manager and Memory Manager, imported from k8s.io/kubernetes, and prints
// what the kubelet decides for each container: its cpuset, its cpuset.mems, or the pod
// admission error (reason and message).
//
// Input: one scenario JSON document per line on stdin (batch mode: many per process) or a
// single scenario file given as the only argument. Output: one result JSON document per
// scenario, one per line. The scenario format is described in docs/differential.md.
//
// The managers are built with their exported constructors and driven the way the kubelet
// drives them (pkg/kubelet/cm/container_manager_linux.go, internal_container_lifecycle.go):
// pod admission is the Topology Manager's Admit (its scope calls Allocate on the CPU and
// memory managers), a container's cpuset is GetCPUAffinity and its mems GetMemoryNUMANodes at
// PreCreateContainer, AddContainer at PreStartContainer, the Topology Manager's
// RemoveContainer at PostStopContainer; a deleted pod leaves the active pods and its
// resources are released by the managers' own stale-state collection at the next admission.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	cadvisorapi "github.com/google/cadvisor/lib/model"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-base/featuregate"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	kubeletconfig "k8s.io/kubernetes/pkg/kubelet/apis/config"
	"k8s.io/kubernetes/pkg/kubelet/cm/containermap"
	"k8s.io/kubernetes/pkg/kubelet/cm/cpumanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/memorymanager"
	cmqos "k8s.io/kubernetes/pkg/kubelet/cm/qos"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"
	"k8s.io/utils/cpuset"

	"nri-cpumgr/oracle/internal/gates"
)

// ---------------------------------------------------------------- scenario format

type cpuRow struct {
	CPU    int `json:"cpu"`
	Core   int `json:"core"`
	Socket int `json:"socket"`
	NUMA   int `json:"numa"`
	Uncore int `json:"uncore"`
}

type numaNode struct {
	ID          int               `json:"id"`
	MemoryBytes uint64            `json:"memory_bytes"`
	Hugepages   map[string]uint64 `json:"hugepages"` // page size in bytes -> pages
	Distances   map[string]uint64 `json:"distances"`
}

type machine struct {
	CPUs      []cpuRow   `json:"cpus"`
	NUMANodes []numaNode `json:"numa_nodes"`
}

type reservedMemory struct {
	NUMANode int32             `json:"numaNode"`
	Limits   map[string]string `json:"limits"`
}

// config uses the KubeletConfiguration names (and the plugin's config keys).
type config struct {
	CPUManagerPolicy             string            `json:"cpuManagerPolicy"`
	CPUManagerPolicyOptions      map[string]string `json:"cpuManagerPolicyOptions"`
	ReservedSystemCPUs           string            `json:"reservedSystemCPUs"`
	KubeReserved                 map[string]string `json:"kubeReserved"`
	SystemReserved               map[string]string `json:"systemReserved"`
	EvictionHard                 map[string]string `json:"evictionHard"`
	FeatureGates                 map[string]bool   `json:"featureGates"`
	TopologyManagerPolicy        string            `json:"topologyManagerPolicy"`
	TopologyManagerScope         string            `json:"topologyManagerScope"`
	TopologyManagerPolicyOptions map[string]string `json:"topologyManagerPolicyOptions"`
	MemoryManagerPolicy          string            `json:"memoryManagerPolicy"`
	ReservedMemory               []reservedMemory  `json:"reservedMemory"`
}

type event struct {
	Op        string  `json:"op"` // add | exit | delete
	Pod       *v1.Pod `json:"pod,omitempty"`
	Name      string  `json:"name,omitempty"`      // exit/delete: the pod's name
	Container string  `json:"container,omitempty"` // exit: the container's name
}

type scenario struct {
	Name    string  `json:"name"`
	Machine machine `json:"machine"`
	Config  config  `json:"config"`
	Events  []event `json:"events"`
}

// ---------------------------------------------------------------- result format

type containerResult struct {
	Name      string `json:"name"`
	CPUs      string `json:"cpus"`
	Exclusive bool   `json:"exclusive"`
	Mems      string `json:"mems"`
	// Pool is "pod" for a container on its pod's shared pool (pod-level resource
	// managers: the CPU manager's ResourceIsolationPod), "" otherwise
	Pool string `json:"pool,omitempty"`
}

type eventResult struct {
	Op         string            `json:"op"`
	Pod        string            `json:"pod"`
	Admitted   *bool             `json:"admitted,omitempty"`
	Reason     string            `json:"reason,omitempty"`
	Message    string            `json:"message,omitempty"`
	Containers []containerResult `json:"containers,omitempty"`
	SharedPool *string           `json:"sharedPool,omitempty"`
	// PodCPUs: the CPUs of an admitted pod's pod-level allocation (GetPodCPUs), "" when none
	PodCPUs string `json:"podCPUs,omitempty"`
	// MemoryUnsatisfiable: a rejected pod's containers (or "" for the pod, pod scope) for
	// which the Memory Manager finds no NUMA node set (an empty hint map: the Topology
	// Manager takes it for "no preference", the pod fails later in an allocation)
	MemoryUnsatisfiable []string `json:"memoryUnsatisfiable,omitempty"`
}

type result struct {
	Name        string        `json:"name"`
	Kubernetes  string        `json:"kubernetes"`
	ConfigError string        `json:"configError,omitempty"`
	Events      []eventResult `json:"events"`
}

// ---------------------------------------------------------------- fakes the managers need

type node struct {
	mu     sync.Mutex
	active []*v1.Pod
}

func (n *node) activePods() []*v1.Pod {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]*v1.Pod(nil), n.active...)
}

func (n *node) setActive(pods []*v1.Pod) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.active = pods
}

type sourcesReady struct{}

func (sourcesReady) AddSource(string) {}
func (sourcesReady) AllReady() bool   { return true }

type noStatus struct{}

func (noStatus) GetPodStatus(types.UID) (v1.PodStatus, bool) { return v1.PodStatus{}, false }

type noRuntime struct{}

func (noRuntime) UpdateContainerResources(context.Context, string, *runtimeapi.ContainerResources) error {
	return nil
}

// ---------------------------------------------------------------- machine -> cadvisor

func machineInfo(m machine) (*cadvisorapi.MachineInfo, error) {
	if len(m.CPUs) == 0 {
		return nil, errors.New("machine: no cpus")
	}
	type coreKey struct{ numa, core int }
	cores := map[coreKey]*cadvisorapi.Core{}
	var order []coreKey
	sockets := map[int]bool{}
	numas := map[int]bool{}
	for _, r := range m.CPUs {
		k := coreKey{r.NUMA, r.Core}
		c, ok := cores[k]
		if !ok {
			c = &cadvisorapi.Core{Id: r.Core, SocketID: r.Socket,
				UncoreCaches: []cadvisorapi.Cache{{Id: r.Uncore, Level: 3, Type: "Unified"}}}
			cores[k] = c
			order = append(order, k)
		}
		c.Threads = append(c.Threads, r.CPU)
		sockets[r.Socket] = true
		numas[r.NUMA] = true
	}
	mem := map[int]numaNode{}
	for _, n := range m.NUMANodes {
		mem[n.ID] = n
		numas[n.ID] = true
	}
	var ids []int
	for id := range numas {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	mi := &cadvisorapi.MachineInfo{NumCores: len(m.CPUs), NumSockets: len(sockets)}
	for _, id := range ids {
		nd := cadvisorapi.Node{Id: id, Memory: mem[id].MemoryBytes}
		var sizes []uint64
		pages := map[uint64]uint64{}
		for k, v := range mem[id].Hugepages {
			b, err := strconv.ParseUint(k, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("machine: numa node %d: hugepage size %q", id, k)
			}
			sizes = append(sizes, b)
			pages[b] = v
		}
		sort.Slice(sizes, func(i, j int) bool { return sizes[i] < sizes[j] })
		for _, b := range sizes {
			nd.HugePages = append(nd.HugePages, cadvisorapi.HugePagesInfo{PageSize: b / 1024, NumPages: pages[b]})
		}
		if len(mem[id].Distances) > 0 {
			for _, j := range ids {
				nd.Distances = append(nd.Distances, mem[id].Distances[strconv.Itoa(j)])
			}
		}
		for _, k := range order {
			if k.numa == id {
				nd.Cores = append(nd.Cores, *cores[k])
			}
		}
		mi.MemoryCapacity += nd.Memory
		mi.Topology = append(mi.Topology, nd)
	}
	return mi, nil
}

// ---------------------------------------------------------------- config -> managers

func quantities(maps ...map[string]string) (v1.ResourceList, error) {
	out := v1.ResourceList{}
	for _, m := range maps {
		for k, s := range m {
			q, err := resource.ParseQuantity(s)
			if err != nil {
				return nil, fmt.Errorf("%s: %q: %w", k, s, err)
			}
			if cur, ok := out[v1.ResourceName(k)]; ok {
				q.Add(cur)
			}
			out[v1.ResourceName(k)] = q
		}
	}
	return out, nil
}

// nodeAllocatableReservation: systemReserved + kubeReserved + the hard eviction threshold
// for memory (cm GetNodeAllocatableReservation); with reservedSystemCPUs the kubelet sets
// systemReserved.cpu to their count and drops kubeReserved.cpu (cmd/kubelet/app/server.go).
func nodeAllocatableReservation(c config) (v1.ResourceList, cpuset.CPUSet, error) {
	kube := map[string]string{}
	for k, v := range c.KubeReserved {
		kube[k] = v
	}
	sys := map[string]string{}
	for k, v := range c.SystemReserved {
		sys[k] = v
	}
	specific := cpuset.New()
	if c.ReservedSystemCPUs != "" {
		s, err := cpuset.Parse(c.ReservedSystemCPUs)
		if err != nil {
			return nil, specific, fmt.Errorf("reservedSystemCPUs: %w", err)
		}
		specific = s
		sys["cpu"] = strconv.Itoa(s.Size())
		delete(kube, "cpu")
	}
	evict := map[string]string{"memory": "100Mi"}
	if c.EvictionHard != nil {
		evict = map[string]string{}
		if v, ok := c.EvictionHard["memory.available"]; ok && !strings.HasSuffix(v, "%") {
			evict["memory"] = v
		}
	}
	r, err := quantities(kube, sys, evict)
	for k, q := range r {
		if q.IsZero() {
			delete(r, k)
		}
	}
	return r, specific, err
}

type managers struct {
	cpu cpumanager.Manager
	mem memorymanager.Manager
	// the Memory Manager as the Topology Manager sees it (recording unsatisfiable hints)
	memHints *memHints
	tm       topologymanager.Manager
	node     *node
}

var touchedGates = map[string]bool{}

func setFeatureGates(set map[string]bool) error {
	all := utilfeature.DefaultMutableFeatureGate.GetAll()
	reset := map[string]bool{}
	for name := range touchedGates {
		if spec, ok := all[featureName(name)]; ok {
			reset[name] = spec.Default
		}
	}
	if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(reset); err != nil {
		return err
	}
	set = gates.WithDependents(set)
	for name := range set {
		touchedGates[name] = true
	}
	return utilfeature.DefaultMutableFeatureGate.SetFromMap(set)
}

func build(ctx context.Context, s scenario, dir string) (*managers, error) {
	logger := klog.FromContext(ctx)
	c := s.Config
	if err := setFeatureGates(c.FeatureGates); err != nil {
		return nil, fmt.Errorf("featureGates: %w", err)
	}
	mi, err := machineInfo(s.Machine)
	if err != nil {
		return nil, err
	}
	reservation, specific, err := nodeAllocatableReservation(c)
	if err != nil {
		return nil, err
	}
	tmPolicy := defaultString(c.TopologyManagerPolicy, "none")
	tmScope := defaultString(c.TopologyManagerScope, "container")
	tm, err := topologymanager.NewManager(logger, mi.Topology, tmPolicy, tmScope, c.TopologyManagerPolicyOptions)
	if err != nil {
		return nil, fmt.Errorf("topology manager: %w", err)
	}
	cpu, err := cpumanager.NewManager(logger, defaultString(c.CPUManagerPolicy, "none"), c.CPUManagerPolicyOptions,
		24*time.Hour, mi, specific, reservation, dir, tm)
	if err != nil {
		return nil, fmt.Errorf("cpu manager: %w", err)
	}
	tm.AddHintProvider(logger, cpu)
	var reserved []kubeletconfig.MemoryReservation
	for _, r := range c.ReservedMemory {
		l, err := quantities(r.Limits)
		if err != nil {
			return nil, fmt.Errorf("reservedMemory: %w", err)
		}
		reserved = append(reserved, kubeletconfig.MemoryReservation{NumaNode: r.NUMANode, Limits: l})
	}
	mem, err := memorymanager.NewManager(logger, defaultString(c.MemoryManagerPolicy, "None"), mi, reservation,
		reserved, dir, tm)
	if err != nil {
		return nil, fmt.Errorf("memory manager: %w", err)
	}
	hints := &memHints{Manager: mem}
	tm.AddHintProvider(logger, hints)
	n := &node{}
	if err := cpu.Start(ctx, n.activePods, sourcesReady{}, noStatus{}, noRuntime{}, containermap.NewContainerMap()); err != nil {
		return nil, fmt.Errorf("cpu manager: %w", err)
	}
	if err := mem.Start(ctx, memorymanager.ActivePodsFunc(n.activePods), sourcesReady{}, noStatus{}, noRuntime{},
		containermap.NewContainerMap()); err != nil {
		return nil, fmt.Errorf("memory manager: %w", err)
	}
	return &managers{cpu: cpu, mem: mem, memHints: hints, tm: tm, node: n}, nil
}

func defaultString(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// ---------------------------------------------------------------- running a scenario

// defaulted applies what the API server's defaulting does to the resources the managers read:
// a limit without a request is also the request (containers and .spec.resources).
func defaulted(p *v1.Pod) *v1.Pod {
	p = p.DeepCopy()
	def := func(r *v1.ResourceRequirements) {
		for k, v := range r.Limits {
			if _, ok := r.Requests[k]; !ok {
				if r.Requests == nil {
					r.Requests = v1.ResourceList{}
				}
				r.Requests[k] = v.DeepCopy()
			}
		}
	}
	for i := range p.Spec.InitContainers {
		def(&p.Spec.InitContainers[i].Resources)
	}
	for i := range p.Spec.Containers {
		def(&p.Spec.Containers[i].Resources)
	}
	if p.Spec.Resources != nil {
		def(p.Spec.Resources)
	}
	if p.Namespace == "" {
		p.Namespace = "default"
	}
	if p.UID == "" {
		p.UID = types.UID("uid-" + p.Name)
	}
	return p
}

func containerID(p *v1.Pod, name string) string { return string(p.UID) + "/" + name }

func mems(s interface{ UnsortedList() []int }) string {
	if s == nil {
		return ""
	}
	l := s.UnsortedList()
	sort.Ints(l)
	return cpuset.New(l...).String()
}

func run(ctx context.Context, s scenario) result {
	res := result{Name: s.Name, Kubernetes: kubernetesVersion(), Events: []eventResult{}}
	dir, err := os.MkdirTemp("", "kubelet-oracle-")
	if err != nil {
		res.ConfigError = err.Error()
		return res
	}
	defer os.RemoveAll(dir)
	m, err := build(ctx, s, dir)
	if err != nil {
		res.ConfigError = err.Error()
		return res
	}
	logger := klog.FromContext(ctx)
	pods := map[string]*v1.Pod{}
	for _, e := range s.Events {
		switch e.Op {
		case "add":
			if e.Pod == nil {
				res.Events = append(res.Events, eventResult{Op: e.Op, Reason: "BadEvent", Message: "add without pod"})
				continue
			}
			p := defaulted(e.Pod)
			er := eventResult{Op: e.Op, Pod: p.Name}
			// the kubelet adds the pod to its pod manager before admitting it
			// (kubelet.go HandlePodAdditions), so it is among the active pods the managers'
			// stale-state collection sees; a rejected pod is failed, no longer active
			others := m.node.activePods()
			m.node.setActive(append(append([]*v1.Pod(nil), others...), p))
			m.memHints.unsatisfiable = nil
			admit := m.tm.Admit(ctx, &lifecycle.PodAdmitAttributes{Pod: p, OtherPods: others,
				Operation: lifecycle.AddOperation})
			ok := admit.Admit
			er.Admitted = &ok
			if !ok {
				er.Reason, er.Message = admit.Reason, admit.Message
				m.node.setActive(others)
				er.MemoryUnsatisfiable = m.memHints.unsatisfiable
				settle(logger, m, p)
			} else {
				pods[p.Name] = p
				for _, c := range append(append([]v1.Container(nil), p.Spec.InitContainers...), p.Spec.Containers...) {
					cr := containerResult{Name: c.Name}
					if cpus := m.cpu.GetCPUAffinity(string(p.UID), c.Name); !cpus.IsEmpty() {
						cr.CPUs = cpus.String()
					}
					// exclusive: the container's own CPUs (ResourceIsolationContainer); a
					// container of a pod-level pod without its own qualifying resources
					// has an entry too, the pod's shared pool (ResourceIsolationPod)
					switch m.cpu.GetResourceIsolationLevel(p, &c) {
					case cmqos.ResourceIsolationContainer:
						cr.Exclusive = true
					case cmqos.ResourceIsolationPod:
						cr.Pool = "pod"
					}
					cr.Mems = mems(m.mem.GetMemoryNUMANodes(logger, p, &c))
					er.Containers = append(er.Containers, cr)
					id := containerID(p, c.Name)
					m.cpu.AddContainer(logger, p, &c, id)
					m.mem.AddContainer(logger, p, &c, id)
					m.tm.AddContainer(logger, p, &c, id)
					if isInit(p, c.Name) && !restartable(c) {
						_ = m.tm.RemoveContainer(logger, id) // ran to completion
					}
				}
			}
			if ok {
				er.PodCPUs = m.cpu.GetPodCPUs(string(p.UID)).String()
			}
			pool := m.cpu.State().GetDefaultCPUSet().String()
			er.SharedPool = &pool
			res.Events = append(res.Events, er)
		case "exit":
			er := eventResult{Op: e.Op, Pod: e.Name}
			if p, ok := pods[e.Name]; ok {
				_ = m.tm.RemoveContainer(logger, containerID(p, e.Container))
			}
			res.Events = append(res.Events, er)
		case "delete":
			er := eventResult{Op: e.Op, Pod: e.Name}
			if p, ok := pods[e.Name]; ok {
				for _, c := range append(append([]v1.Container(nil), p.Spec.InitContainers...), p.Spec.Containers...) {
					_ = m.tm.RemoveContainer(logger, containerID(p, c.Name))
				}
				delete(pods, e.Name)
				var keep []*v1.Pod
				for _, q := range m.node.activePods() {
					if q.UID != p.UID {
						keep = append(keep, q)
					}
				}
				m.node.setActive(keep)
			}
			res.Events = append(res.Events, er)
		default:
			res.Events = append(res.Events, eventResult{Op: e.Op, Reason: "BadEvent", Message: "unknown op " + e.Op})
		}
	}
	return res
}

// settle runs the managers' stale-state collection after a rejected pod, as the next
// admission (or the CPU manager's reconcile loop) would: the rejected pod is no longer active,
// so what its admission allocated before it failed (the pod scope allocates container by
// container) is released, and the shared pool reported is the one the next pod sees. The
// managers' hint calls do it (cpu_manager.go / memory_manager.go GetTopologyHints call
// removeStaleState first; the hints change no state).
func settle(logger klog.Logger, m *managers, p *v1.Pod) {
	for _, c := range append(append([]v1.Container(nil), p.Spec.InitContainers...), p.Spec.Containers...) {
		m.cpu.GetTopologyHints(logger, p, &c, lifecycle.AddOperation)
		m.mem.GetTopologyHints(logger, p, &c, lifecycle.AddOperation)
		return // (one call each collects the stale state)
	}
}

// memHints is the Memory Manager as the Topology Manager's hint provider, recording the
// containers (pod scope: "" for the pod) for which it answers an empty, non-nil hint map: no
// NUMA node set can hold their memory, which the Topology Manager takes for "no preference"
// (the pod is admitted and fails later, in an allocation).
type memHints struct {
	memorymanager.Manager
	unsatisfiable []string
}

func (h *memHints) GetTopologyHints(logger klog.Logger, pod *v1.Pod, c *v1.Container, op lifecycle.Operation) map[string][]topologymanager.TopologyHint {
	r := h.Manager.GetTopologyHints(logger, pod, c, op)
	if r != nil && len(r) == 0 {
		h.unsatisfiable = append(h.unsatisfiable, c.Name)
	}
	return r
}

func (h *memHints) GetPodTopologyHints(logger klog.Logger, pod *v1.Pod, op lifecycle.Operation) map[string][]topologymanager.TopologyHint {
	r := h.Manager.GetPodTopologyHints(logger, pod, op)
	if r != nil && len(r) == 0 {
		h.unsatisfiable = append(h.unsatisfiable, "")
	}
	return r
}

func isInit(p *v1.Pod, name string) bool {
	for _, c := range p.Spec.InitContainers {
		if c.Name == name {
			return true
		}
	}
	return false
}

func restartable(c v1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways
}

// kubernetesVersion is set at build time (-ldflags -X main.version=...).
var version = "unknown"

func kubernetesVersion() string { return version }

func featureName(s string) featuregate.Feature { return featuregate.Feature(s) }

// ---------------------------------------------------------------- main

func main() {
	klog.SetLogger(logr.Discard())
	ctx := klog.NewContext(context.Background(), logr.Discard())
	if len(os.Args) > 2 || (len(os.Args) == 2 && strings.HasPrefix(os.Args[1], "-")) {
		fmt.Fprintln(os.Stderr, "usage: kubelet-oracle [SCENARIO.json]   (no argument: one scenario per line on stdin)")
		os.Exit(2)
	}
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	emit := func(r result) {
		b, _ := json.Marshal(r)
		out.Write(b)
		out.WriteByte('\n')
		out.Flush()
	}
	if len(os.Args) == 2 {
		b, err := os.ReadFile(os.Args[1])
		if err != nil {
			fmt.Fprintln(os.Stderr, "kubelet-oracle:", err)
			os.Exit(2)
		}
		var s scenario
		if err := json.Unmarshal(b, &s); err != nil {
			fmt.Fprintf(os.Stderr, "kubelet-oracle: %s: %v\n", os.Args[1], err)
			os.Exit(2)
		}
		emit(run(ctx, s))
		return
	}
	in := bufio.NewReaderSize(os.Stdin, 1<<20)
	for {
		line, err := in.ReadBytes('\n')
		if len(strings.TrimSpace(string(line))) > 0 {
			var s scenario
			if jerr := json.Unmarshal(line, &s); jerr != nil {
				emit(result{ConfigError: "bad scenario: " + jerr.Error(), Events: []eventResult{}})
			} else {
				emit(run(ctx, s))
			}
		}
		if err == io.EOF {
			return
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "kubelet-oracle:", err)
			os.Exit(2)
		}
	}
}
