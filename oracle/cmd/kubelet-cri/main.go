// Command kubelet-cri prints the CRI requests the kubelet sends for pods: per pod the
// sandbox's LinuxPodSandboxConfig resources and overhead, per container the
// LinuxContainerResources of its CreateContainer request.
//
// Nothing here computes a resource: the kubelet's own runtime manager
// (k8s.io/kubernetes/pkg/kubelet/kuberuntime, NewKubeGenericRuntimeManager) runs SyncPod
// against the CRI API's fake runtime service (k8s.io/cri-api/pkg/apis/testing), and this
// command records the RunPodSandbox and CreateContainer requests it receives. Pods are
// defaulted first the way the API server defaults them (k8s.io/kubernetes/pkg/apis/core/v1
// SetObjectDefaults_Pod), since the kubelet only ever sees defaulted pods.
//
// Input (stdin or the file named by the one argument), JSON:
//
//	{"memoryCapacity": <bytes, optional: the node's MemTotal by default>,
//	 "featureGates": {"<gate>": true|false, ...},   // optional, the kubelet's gates (a gate
//	                                                // off turns off the gates depending on it)
//	 "cpuCFSQuota": true,                            // optional, kubelet default true
//	 "pods": [<v1.Pod>, ...]}
//
// Output, JSON on stdout: {"kubelet": "<version>", "pods": [{"name", "namespace", "uid",
// "sandbox": {"resources": R|null, "overhead": R|null}, "containers": [{"name", "kind":
// "init"|"sidecar"|"app", "resources": R}]}]}, containers in the order the kubelet creates
// them; R = {"cpuPeriod", "cpuQuota", "cpuShares", "memoryLimitInBytes", "oomScoreAdj",
// "cpusetCpus", "cpusetMems", "hugepageLimits": [{"pageSize", "limit"}], "unified"}.
// Errors: a message on stderr, exit status 1 (bad input) or 2 (the kubelet refused a pod).
// KUBELET_CRI_DEBUG=1 prints each SyncPod round's CRI calls and container states on stderr.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	cadvisorapi "github.com/google/cadvisor/lib/model"
	noopoteltrace "go.opentelemetry.io/otel/trace/noop"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubetypes "k8s.io/apimachinery/pkg/types"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/flowcontrol"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	apitest "k8s.io/cri-api/pkg/apis/testing"
	"k8s.io/klog/v2"
	corev1defaults "k8s.io/kubernetes/pkg/apis/core/v1"
	kubeletconfig "k8s.io/kubernetes/pkg/kubelet/apis/config"
	"k8s.io/kubernetes/pkg/kubelet/cm"
	kubecontainer "k8s.io/kubernetes/pkg/kubelet/container"
	containertest "k8s.io/kubernetes/pkg/kubelet/container/testing"
	"k8s.io/kubernetes/pkg/kubelet/kuberuntime"
	"k8s.io/kubernetes/pkg/kubelet/logs"
	proberesults "k8s.io/kubernetes/pkg/kubelet/prober/results"
	"k8s.io/utils/ptr"

	"nri-cpumgr/oracle/internal/gates"
)

type input struct {
	MemoryCapacity uint64          `json:"memoryCapacity"`
	FeatureGates   map[string]bool `json:"featureGates"`
	CPUCFSQuota    *bool           `json:"cpuCFSQuota"`
	Pods           []v1.Pod        `json:"pods"`
}

type hugepage struct {
	PageSize string `json:"pageSize"`
	Limit    uint64 `json:"limit"`
}

type resources struct {
	CPUPeriod          int64             `json:"cpuPeriod"`
	CPUQuota           int64             `json:"cpuQuota"`
	CPUShares          int64             `json:"cpuShares"`
	MemoryLimitInBytes int64             `json:"memoryLimitInBytes"`
	OomScoreAdj        int64             `json:"oomScoreAdj"`
	CpusetCpus         string            `json:"cpusetCpus"`
	CpusetMems         string            `json:"cpusetMems"`
	HugepageLimits     []hugepage        `json:"hugepageLimits"`
	Unified            map[string]string `json:"unified"`
}

type containerOut struct {
	Name      string     `json:"name"`
	Kind      string     `json:"kind"`
	Resources *resources `json:"resources"`
}

type sandboxOut struct {
	Resources *resources `json:"resources"`
	Overhead  *resources `json:"overhead"`
}

type podOut struct {
	Name       string         `json:"name"`
	Namespace  string         `json:"namespace"`
	UID        string         `json:"uid"`
	Sandbox    sandboxOut     `json:"sandbox"`
	Containers []containerOut `json:"containers"`
}

type output struct {
	Kubelet string   `json:"kubelet"`
	Pods    []podOut `json:"pods"`
}

func convert(r *runtimeapi.LinuxContainerResources) *resources {
	if r == nil {
		return nil
	}
	out := &resources{
		CPUPeriod: r.CpuPeriod, CPUQuota: r.CpuQuota, CPUShares: r.CpuShares,
		MemoryLimitInBytes: r.MemoryLimitInBytes, OomScoreAdj: r.OomScoreAdj,
		CpusetCpus: r.CpusetCpus, CpusetMems: r.CpusetMems,
		HugepageLimits: []hugepage{}, Unified: map[string]string{},
	}
	for _, h := range r.HugepageLimits {
		out.HugepageLimits = append(out.HugepageLimits, hugepage{h.PageSize, h.Limit})
	}
	for k, v := range r.Unified {
		out.Unified[k] = v
	}
	return out
}

// recorder is the fake runtime service, recording every sandbox and container request.
type recorder struct {
	*apitest.FakeRuntimeService
	mu         sync.Mutex
	sandboxes  map[string]*runtimeapi.PodSandboxConfig // pod uid -> config
	containers map[string][]*runtimeapi.ContainerConfig
}

func (r *recorder) RunPodSandbox(ctx context.Context, config *runtimeapi.PodSandboxConfig, handler string) (string, error) {
	r.mu.Lock()
	r.sandboxes[config.GetMetadata().GetUid()] = config
	r.mu.Unlock()
	return r.FakeRuntimeService.RunPodSandbox(ctx, config, handler)
}

func (r *recorder) CreateContainer(ctx context.Context, id string, config *runtimeapi.ContainerConfig, sandbox *runtimeapi.PodSandboxConfig) (string, error) {
	r.mu.Lock()
	uid := sandbox.GetMetadata().GetUid()
	r.containers[uid] = append(r.containers[uid], config)
	r.mu.Unlock()
	return r.FakeRuntimeService.CreateContainer(ctx, id, config, sandbox)
}

// podCgroups is the fake pod container manager, except that a pod's cgroup reads as the
// kubelet made it (cm.ResourceConfigForPod): the kubelet's in-place resize path asks for it
// when it starts a container of a pod with .spec.resources after an init container.
type podCgroups struct {
	*cm.FakePodContainerManager
	quota bool
}

func (p podCgroups) GetPodCgroupConfig(pod *v1.Pod, _ v1.ResourceName) (*cm.ResourceConfig, error) {
	c := cm.ResourceConfigForPod(pod, p.quota, 100000, false,
		kubeletconfig.NoneMemoryReservationPolicy)
	// a cgroup always reads as some value: no limit is "max" (the kubelet's cgroup manager
	// reads memory.max "max" as the largest value, cpu.max "max" as quota -1)
	if c.Memory == nil {
		c.Memory = ptr.To(int64(math.MaxInt64))
	}
	if c.CPUQuota == nil {
		c.CPUQuota = ptr.To(int64(-1))
	}
	if c.CPUPeriod == nil {
		c.CPUPeriod = ptr.To(uint64(100000))
	}
	return c, nil
}

type containerManager struct {
	*cm.FakeContainerManager
	quota bool
}

func (c containerManager) NewPodContainerManager() cm.PodContainerManager {
	return podCgroups{cm.NewFakePodContainerManager(), c.quota}
}

type podState struct{}

func (podState) IsPodTerminationRequested(kubetypes.UID) bool { return false }
func (podState) ShouldPodContentBeRemoved(kubetypes.UID) bool { return false }
func (podState) ShouldPodRuntimeBeRemoved(kubetypes.UID) bool { return false }

type timeRecorder struct{}

func (timeRecorder) RecordImageStartedPulling(kubetypes.UID)              {}
func (timeRecorder) RecordImageFinishedPulling(kubetypes.UID)             {}
func (timeRecorder) RecordInitContainerStarted(kubetypes.UID, time.Time)  {}
func (timeRecorder) RecordInitContainerFinished(kubetypes.UID, time.Time) {}

func memTotal() (uint64, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			kb, err := strconv.ParseUint(fields[1], 10, 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("no MemTotal in /proc/meminfo")
}

func newManager(ctx context.Context, in *input, rt *recorder, root string) (kuberuntime.KubeGenericRuntime, error) {
	capacity := in.MemoryCapacity
	if capacity == 0 {
		var err error
		if capacity, err = memTotal(); err != nil {
			return nil, err
		}
	}
	machine := &cadvisorapi.MachineInfo{MemoryCapacity: capacity}
	allocatable := v1.ResourceList{
		v1.ResourceMemory: *resource.NewQuantity(int64(capacity), resource.BinarySI),
		v1.ResourceCPU:    resource.MustParse("1000"),
	}
	m, _, err := kuberuntime.NewKubeGenericRuntimeManager(
		ctx, &record.FakeRecorder{}, proberesults.NewManager(), proberesults.NewManager(),
		proberesults.NewManager(), root, root+"/pods", machine, podState{}, 110,
		&containertest.FakeOS{}, &containertest.FakeRuntimeHelper{}, nil,
		flowcontrol.NewBackOff(time.Second, time.Minute), false, nil, 0, 0,
		"NeverVerifyPreloadedImages", nil, "", "", ptr.To(false),
		ptr.Deref(in.CPUCFSQuota, true), metav1.Duration{Duration: 100 * time.Millisecond}, nil,
		rt, apitest.NewFakeImageService(),
		containerManager{cm.NewFakeContainerManager(klog.FromContext(ctx)), ptr.Deref(in.CPUCFSQuota, true)},
		logs.NewStubContainerLogManager(), nil, false, "",
		func() v1.ResourceList { return allocatable }, ptr.To(0.9),
		kubeletconfig.NoneMemoryReservationPolicy, timeRecorder{},
		noopoteltrace.NewTracerProvider(), nil, nil, timeRecorder{},
	)
	return m, err
}

func kinds(pod *v1.Pod) map[string]string {
	out := map[string]string{}
	for _, c := range pod.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways {
			out[c.Name] = "sidecar"
		} else {
			out[c.Name] = "init"
		}
	}
	for _, c := range pod.Spec.Containers {
		out[c.Name] = "app"
	}
	return out
}

// syncPod runs the kubelet's SyncPod until every container of the pod was created: after
// each round the regular init containers it started exit with status 0, as they would.
func syncPod(ctx context.Context, m kuberuntime.KubeGenericRuntime, rt *recorder, pod *v1.Pod) error {
	kind := kinds(pod)
	want := len(kind)
	backoff := flowcontrol.NewBackOff(time.Second, time.Minute)
	status := &kubecontainer.PodStatus{ID: pod.UID, Name: pod.Name, Namespace: pod.Namespace}
	// what the kubelet's syncPod does before SyncPod (kubelet.go: when it creates the pod's
	// cgroup, then once the volumes are mounted)
	logger := klog.FromContext(ctx)
	if err := m.UpdateActuatedPodLevelResources(logger, pod); err != nil {
		return fmt.Errorf("UpdateActuatedPodLevelResources: %w", err)
	}
	m.InitializeActuatedPod(logger, pod)
	for round := 0; round < 2*want+4; round++ {
		res := m.SyncPod(ctx, pod, status, nil, backoff, false)
		if err := res.Error(); err != nil {
			return fmt.Errorf("SyncPod: %w", err)
		}
		rt.mu.Lock()
		created := len(rt.containers[string(pod.UID)])
		rt.mu.Unlock()
		if os.Getenv("KUBELET_CRI_DEBUG") != "" {
			rt.FakeRuntimeService.Lock()
			fmt.Fprintf(os.Stderr, "round %d: calls %v\n", round, rt.FakeRuntimeService.Called)
			rt.FakeRuntimeService.Called = nil
			for id, c := range rt.FakeRuntimeService.Containers {
				fmt.Fprintf(os.Stderr, "  %s state=%v exit=%d\n", id, c.State, c.ExitCode)
			}
			rt.FakeRuntimeService.Unlock()
		}
		if created >= want {
			return nil
		}
		rt.FakeRuntimeService.Lock()
		for _, c := range rt.FakeRuntimeService.Containers {
			if c.Labels["io.kubernetes.pod.uid"] != string(pod.UID) {
				continue
			}
			if kind[c.Metadata.Name] == "init" && c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
				c.State = runtimeapi.ContainerState_CONTAINER_EXITED
				c.ExitCode = 0
				c.FinishedAt = time.Now().UnixNano()
			}
		}
		rt.FakeRuntimeService.Unlock()
		running, err := m.GetPod(ctx, pod.UID)
		if err != nil {
			return fmt.Errorf("GetPod: %w", err)
		}
		if status, err = m.GetPodStatus(ctx, running); err != nil {
			return fmt.Errorf("GetPodStatus: %w", err)
		}
	}
	return fmt.Errorf("the kubelet created %d of %d containers", len(rt.containers[string(pod.UID)]), want)
}

func run(args []string, stdin io.Reader, stdout io.Writer) (int, error) {
	var data []byte
	var err error
	if len(args) > 0 && args[0] != "-" {
		data, err = os.ReadFile(args[0])
	} else {
		data, err = io.ReadAll(stdin)
	}
	if err != nil {
		return 1, err
	}
	var in input
	if err := json.Unmarshal(data, &in); err != nil {
		return 1, fmt.Errorf("input: %w", err)
	}
	if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(gates.WithDependents(in.FeatureGates)); err != nil {
		return 1, fmt.Errorf("featureGates: %w", err)
	}
	ctx := context.Background()
	root, err := os.MkdirTemp("", "kubelet-cri-")
	if err != nil {
		return 1, err
	}
	defer os.RemoveAll(root)
	rt := &recorder{
		FakeRuntimeService: apitest.NewFakeRuntimeService(),
		sandboxes:          map[string]*runtimeapi.PodSandboxConfig{},
		containers:         map[string][]*runtimeapi.ContainerConfig{},
	}
	m, err := newManager(ctx, &in, rt, root)
	if err != nil {
		return 1, fmt.Errorf("runtime manager: %w", err)
	}
	out := output{Kubelet: kubeletVersion(), Pods: []podOut{}}
	seen := map[kubetypes.UID]bool{}
	for i := range in.Pods {
		pod := &in.Pods[i]
		if pod.Name == "" {
			return 1, fmt.Errorf("pods[%d]: no metadata.name", i)
		}
		if pod.Namespace == "" {
			pod.Namespace = "default"
		}
		if pod.UID == "" {
			pod.UID = kubetypes.UID(fmt.Sprintf("%08d-0000-4000-8000-000000000000", i))
		}
		if seen[pod.UID] {
			return 1, fmt.Errorf("pods[%d]: uid %s given twice", i, pod.UID)
		}
		seen[pod.UID] = true
		corev1defaults.SetObjectDefaults_Pod(pod)
		if err := syncPod(ctx, m, rt, pod); err != nil {
			return 2, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		kind := kinds(pod)
		sb := rt.sandboxes[string(pod.UID)]
		po := podOut{Name: pod.Name, Namespace: pod.Namespace, UID: string(pod.UID),
			Sandbox: sandboxOut{Resources: convert(sb.GetLinux().GetResources()),
				Overhead: convert(sb.GetLinux().GetOverhead())}}
		for _, c := range rt.containers[string(pod.UID)] {
			name := c.GetMetadata().GetName()
			po.Containers = append(po.Containers, containerOut{Name: name, Kind: kind[name],
				Resources: convert(c.GetLinux().GetResources())})
		}
		out.Pods = append(out.Pods, po)
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", " ")
	return 0, enc.Encode(out)
}

// kubeletVersion is the k8s.io/kubernetes module this command was built with.
func kubeletVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, d := range info.Deps {
			if d.Path == "k8s.io/kubernetes" {
				return d.Version
			}
		}
	}
	return "unknown"
}

func main() {
	klog.SetOutput(io.Discard)
	klog.LogToStderr(false)
	code, err := run(os.Args[1:], os.Stdin, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubelet-cri:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}
