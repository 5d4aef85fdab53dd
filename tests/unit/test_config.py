import pytest

from nri_cpumgr.config import ConfigError, load_config, parse_config
from nri_cpumgr.cpuset import CPUSet


def test_defaults_follow_the_kubelet():
    c = parse_config("")
    assert c.cpuManagerPolicy == "none"
    assert c.topologyManagerPolicy == "none"
    assert c.memoryManagerPolicy == "None"
    assert c.socketPath == "/var/run/nri/nri.sock"
    assert c.pluginIndex == "90"


def test_static_with_reserved_list():
    c = parse_config('cpuManagerPolicy: static\nreservedSystemCPUs: "0,4-5"\n')
    assert c.reserved_cpus() == CPUSet({0, 4, 5})
    assert c.reserved_cpu_count() == 3


def test_reserved_count_from_kube_and_system_reserved_rounds_up():
    c = parse_config("kubeReserved: {cpu: 500m}\nsystemReserved: {cpu: 600m}\n")
    assert c.reserved_cpus() == CPUSet()
    assert c.reserved_cpu_count() == 2


def test_yaml_bool_option_values_become_kubelet_strings():
    c = parse_config("cpuManagerPolicyOptions: {full-pcpus-only: true}\n")
    assert c.cpuManagerPolicyOptions == {"full-pcpus-only": "true"}


@pytest.mark.parametrize(
    "text, key",
    [
        ("cpuManagerPolicy: statik", "cpuManagerPolicy"),
        ("cpuManagerPolcy: static", "cpuManagerPolcy: unknown key"),
        ("reservedSystemCPUs: 3-1", "reservedSystemCPUs"),
        ("pluginIndex: '7'", "pluginIndex"),
        ("kubeReserved: {cpu: lots}", "kubeReserved"),
        ("topologyManagerPolicy: strict", "topologyManagerPolicy"),
        ("- a\n- b", "mapping"),
        ("a: [", "not YAML"),
        ("socketPath: ''", "socketPath: expected a path"),
        ("stateDirectory: ' '", "stateDirectory: expected a path"),
    ],
)
def test_bad_config_is_one_line_naming_the_key(text, key):
    with pytest.raises(ConfigError) as ei:
        parse_config(text)
    msg = str(ei.value)
    assert key in msg
    assert "\n" not in msg


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(tmp_path / "nope.yaml")


def test_the_reserved_list_overrides_the_reserved_cpu_quantities_as_the_kubelet_does():
    """kubelet server.go: --reserved-cpus overwrites the cpu of kube/system-reserved (the
    list's size is the count); a disagreement is a warning, never a refusal."""
    ok = parse_config('reservedSystemCPUs: "0,8"\nkubeReserved: {cpu: 1500m}\n')
    assert ok.reserved_cpu_count() == 2 and ok.reserved_cpus_override() is None
    c = parse_config('reservedSystemCPUs: "0"\nkubeReserved: {cpu: 100m}\n'
                     'systemReserved: {cpu: "2"}\n')
    assert c.reserved_cpu_count() == 1
    assert c.reserved_cpus_override() == (
        "reservedSystemCPUs '0' (1 CPU) overrides the cpu of kubeReserved + systemReserved "
        "(3 CPUs), as the kubelet's --reserved-cpus does")
    assert parse_config('systemReserved: {cpu: "2"}\n').reserved_cpus_override() is None
    with pytest.raises(ConfigError, match="invalid quantity"):
        parse_config('reservedSystemCPUs: "0"\nkubeReserved: {cpu: x}\n')


def test_shared_pool_durations_need_a_unit_and_are_read_in_seconds():
    from nri_cpumgr.config import ConfigError, parse_config

    c = parse_config('sharedPoolShrinkDelay: 250ms\nsharedPoolGrowDelay: 1m30s\n')
    assert (c.duration("sharedPoolShrinkDelay"), c.duration("sharedPoolGrowDelay")) == \
        (0.25, 90.0)
    assert parse_config("").duration("sharedPoolGrowDelay") == 10.0
    for bad, says in (("1", 'for example "1s"'), ('"1"', "invalid duration '1'"),
                      ('"2x"', "invalid duration")):
        try:
            parse_config(f"sharedPoolShrinkDelay: {bad}\n")
        except ConfigError as e:
            assert "sharedPoolShrinkDelay" in str(e) and says in str(e), str(e)
        else:
            raise AssertionError(f"{bad} accepted")


def test_shared_pool_update_mode():
    from nri_cpumgr.config import ConfigError, parse_config

    assert parse_config("").sharedPoolUpdateMode == "auto"
    assert parse_config("sharedPoolUpdateMode: async\n").sharedPoolUpdateMode == "async"
    assert parse_config("sharedPoolUpdateMode: reply\n").sharedPoolUpdateMode == "reply"
    with pytest.raises(ConfigError, match="sharedPoolUpdateMode"):
        parse_config("sharedPoolUpdateMode: later\n")


def test_none_policy_with_options_is_refused_as_the_kubelet_refuses_it():
    """kubelet cpumanager NewNonePolicy (v1.37.2): "None policy: received unsupported
    options"; found by the differential run (tests/differential/regressions/
    none-policy-refuses-options.json)."""
    from nri_cpumgr.managers import build_policy
    from nri_cpumgr.topology import CPUInfo, CPUTopology, Machine

    machine = Machine(CPUTopology.from_details({c: CPUInfo(0, 0, c) for c in range(4)}))
    cfg = parse_config("cpuManagerPolicy: none\n"
                       "cpuManagerPolicyOptions: {full-pcpus-only: 'true'}\n")
    with pytest.raises(ConfigError, match="none policy takes no options.*full-pcpus-only"):
        build_policy(cfg, machine)
    assert build_policy(parse_config("cpuManagerPolicy: none\n"), machine) is not None


def test_pod_level_resource_managers_needs_pod_level_resources_not_turned_off():
    """The kubelet v1.37.2 refuses a feature gate whose dependency is off (component-base
    featuregate dependencies, pkg/features: PodLevelResourceManagers depends on
    PodLevelResources); found by the differential run against the kubelet oracle."""
    with pytest.raises(ConfigError, match=r"featureGates.*PodLevelResourceManagers is enabled, "
                                          r"but depends on .*\[PodLevelResources\]"):
        parse_config("featureGates: {PodLevelResources: false, PodLevelResourceManagers: true}")
    # the plugin's own default for PodLevelResources is off (the kubelet's is on): left alone
    c = parse_config("featureGates: {PodLevelResourceManagers: true}")
    assert c.featureGates == {"PodLevelResourceManagers": True}
    c = parse_config("featureGates: {PodLevelResources: true, PodLevelResourceManagers: true}")
    assert c.featureGates["PodLevelResourceManagers"] is True


@pytest.mark.parametrize("path", ["nri.sock", "run/nri/nri.sock", "./nri.sock", "~/nri.sock"])
def test_socket_path_must_be_absolute(path):
    """The runtime's NRI socket is an absolute path (containerd's socket_path, CRI-O's
    nri_listen); a relative one would depend on the plugin's working directory."""
    with pytest.raises(ConfigError) as ei:
        parse_config(f"socketPath: {path}\n", "c.yaml")
    assert str(ei.value) == (
        f"invalid config: socketPath: {path!r}: expected an absolute path (the runtime's NRI "
        "socket, e.g. /var/run/nri/nri.sock) (c.yaml)")
    assert parse_config("socketPath: /run/containerd/nri.sock\n").socketPath == \
        "/run/containerd/nri.sock"


def test_quantities_follow_the_kubelets_reading():
    """kubeReserved/systemReserved are the kubelet's map[string]string, each value read by
    resource.ParseQuantity (cmd/kubelet/app/server.go parseResourceList, v1.37.2): no blanks,
    no exponent with a unit suffix. reservedMemory limits are a v1.ResourceList decoded by
    Quantity.UnmarshalJSON, which trims blanks first."""
    with pytest.raises(ConfigError) as ei:
        parse_config('kubeReserved: {cpu: " 2 "}\n')
    assert str(ei.value) == ("invalid config: kubeReserved: cpu: invalid quantity ' 2 ': "
                             "blanks around it (a Kubernetes quantity has none) (<config>)")
    with pytest.raises(ConfigError, match=r"systemReserved: memory: invalid quantity '1e3Mi': "
                       r"an exponent \(e3\) and a unit suffix together"):
        parse_config("systemReserved: {memory: 1e3Mi}\n")
    with pytest.raises(ConfigError, match=r"reservedMemory.0.limits: memory: invalid quantity "
                       r"'1e3Mi': an exponent"):
        parse_config("reservedMemory: [{numaNode: 0, limits: {memory: 1e3Mi}}]\n")
    c = parse_config('memoryManagerPolicy: Static\nkubeReserved: {memory: 1e3}\n'
                     'reservedMemory: [{numaNode: 0, limits: {memory: " 1100 "}}]\n'
                     'evictionHard: {}\n')
    assert c.reservedMemory[0].limits == {"memory": " 1100 "}
    assert c.node_allocatable_memory_reservation() == {"memory": 1000}


@pytest.mark.parametrize("value, capacity, want", [
    ("100Mi", 0, 100 << 20),
    ("10%", 64 << 30, int(float(64 << 30) * 0.10000000149011612)),  # float32(0.1)
    ("5.5%", 1000, 54),  # (float32(5.5) / 100 < 0.055: Go gives 54 too)
    ("0%", 1 << 30, 0), ("100%", 1 << 30, 0),  # (the kubelet sets no threshold for these)
    ("7%", 0, 0),
])
def test_eviction_threshold_bytes_as_the_kubelet_computes_them(value, capacity, want):
    from nri_cpumgr.config.model import eviction_threshold_bytes

    assert eviction_threshold_bytes(value, capacity) == want


@pytest.mark.parametrize("value, why", [
    ("x%", "not a percentage"), ("inf%", "not a percentage"), ("-1%", "must be >= 0%"),
    ("101%", "must be <= 100%"), ("1e40%", "must be <= 100%"),
])
def test_a_percentage_the_kubelet_refuses_is_refused(value, why):
    from nri_cpumgr.config.model import eviction_threshold_bytes

    with pytest.raises(ValueError, match=why):
        eviction_threshold_bytes(value, 1 << 30)


def test_a_percentage_threshold_counts_in_the_memory_managers_reservation():
    """evictionHard memory.available "10%" on a node of 2 x 8 GiB: reservedMemory must add up
    to the kubelet's 10% of the node's memory (float32 share), not to 0."""
    from nri_cpumgr.managers import build_memory_manager
    from nri_cpumgr.topology import CPUInfo, CPUTopology, Machine
    from nri_cpumgr.topology.model import NUMANodeInfo

    topo = CPUTopology.from_details({0: CPUInfo(0, 0, 0), 1: CPUInfo(1, 1, 1)})
    gib = 1 << 30
    machine = Machine(topo, {0: NUMANodeInfo(0, 8 * gib, {}, {0: 10, 1: 20}),
                             1: NUMANodeInfo(1, 8 * gib, {}, {0: 20, 1: 10})})
    ten = int(float(16 * gib) * 0.10000000149011612)
    base = 'cpuManagerPolicy: static\nreservedSystemCPUs: "0"\nmemoryManagerPolicy: Static\n' \
           'evictionHard: {memory.available: "10%"}\n'
    ok = parse_config(base + f"reservedMemory: [{{numaNode: 0, limits: {{memory: {ten}}}}}]\n")
    assert build_memory_manager(ok, machine) is not None
    bad = parse_config(base + "reservedMemory: [{numaNode: 0, limits: {memory: 100Mi}}]\n")
    with pytest.raises(ConfigError, match=f"here {{'memory': {ten}}}"):
        build_memory_manager(bad, machine)


@pytest.mark.parametrize("text", ["0, 1", " 0 ", "0-1 ", "0,\t2"])
def test_blanks_in_the_reserved_list_are_refused_as_the_kubelet_refuses_them(text):
    """k8s.io/utils/cpuset Parse reads each element with strconv.Atoi: no blanks."""
    with pytest.raises(ConfigError, match=r"reservedSystemCPUs: .*blanks in a CPU list"):
        parse_config(f"reservedSystemCPUs: {text!r}\n".replace("'", '"'))


@pytest.mark.parametrize("text, want", [
    # evictionHard: checked whatever the memory manager policy, as the kubelet's
    # ParseThresholdConfig does (eviction helpers.go, v1.37.2)
    ("evictionHard: {memory.available: abc}",
     "evictionHard: memory.available: invalid quantity 'abc'"),
    ("evictionHard: {memory.available: 1e3Mi}",
     "evictionHard: memory.available: invalid quantity '1e3Mi'"),
    ("evictionHard: {memory.available: -100Mi}",
     "evictionHard: memory.available: '-100Mi' must be positive"),
    ("evictionHard: {nodefs.available: '0'}", "evictionHard: nodefs.available: '0' must be"),
    ("evictionHard: {memory.availabe: 100Mi}",
     "evictionHard: memory.availabe: unsupported eviction signal"),
    ("evictionHard: {memory.available: '101%'}", "evictionHard: memory.available: '101%'"),
    # kubeReserved/systemReserved: the kubelet's parseResourceList (cmd/kubelet/app/server.go)
    ("kubeReserved: {cpu: '-500m'}", "kubeReserved: cpu: '-500m' is negative"),
    ("systemReserved: {memory: '-1'}", "systemReserved: memory: '-1' is negative"),
    ("kubeReserved: {bogus: 1}", "kubeReserved: bogus: cannot reserve 'bogus'"),
    ("kubeReserved: {hugepages-2Mi: 1Gi}", "kubeReserved: hugepages-2Mi: cannot reserve"),
    # featureGates: map[string]bool in the kubelet: a string is a decoding error
    ("featureGates: {PodLevelResources: 'true'}",
     "featureGates.PodLevelResources: expected true or false, got a string"),
    ("featureGates: {PodLevelResources: 1}", "featureGates.PodLevelResources: expected true"),
    # durations: Go's time.ParseDuration refuses more than int64 nanoseconds
    ("sharedPoolShrinkDelay: 2562048h", "sharedPoolShrinkDelay: invalid duration '2562048h': "
                                        "out of range"),
    ("sharedPoolGrowDelay: 9999999999h", "sharedPoolGrowDelay: invalid duration"),
    ("podSpecWait: 2562047h47m16.854775808s", "podSpecWait: invalid duration"),
    # CPU lists and integers: ASCII digits (Go's strconv.Atoi), int64
    ("reservedSystemCPUs: '١'", "reservedSystemCPUs: invalid cpulist '١'"),
    ("reservedSystemCPUs: '1_0'", "reservedSystemCPUs: invalid cpulist '1_0'"),
    ("reservedMemory: [{numaNode: '١', limits: {memory: 1Gi}}]",
     "reservedMemory.0.numaNode: expected a NUMA node number"),
    ("kubeletStateDirectory: var/lib/kubelet",
     "kubeletStateDirectory: 'var/lib/kubelet': expected an absolute path"),
])
def test_values_the_kubelet_refuses_are_refused_in_one_line(text, want):
    with pytest.raises(ConfigError) as ei:
        parse_config(text + "\n")
    assert want in str(ei.value) and "\n" not in str(ei.value)


@pytest.mark.parametrize("text", [
    "evictionHard: {memory.available: 100Mi, nodefs.available: '10%', pid.available: '0%'}",
    "evictionHard: {}", "evictionHard: {imagefs.inodesFree: 5%, memory.available: 1e3}",
    "kubeReserved: {cpu: 500m, memory: 1Gi, ephemeral-storage: 1Gi, pid: '100'}",
    "systemReserved: {cpu: '0'}",
    "featureGates: {PodLevelResources: true, CPUManagerPolicyAlphaOptions: false}",
    "sharedPoolShrinkDelay: 2562047h47m16.854775807s", "sharedPoolGrowDelay: 2562047h",
    "kubeletStateDirectory: ''", "kubeletStateDirectory: /var/lib/kubelet",
    "metricsAddress: '[::1]:9109'", "metricsAddress: '[::]:0'", "metricsAddress: ':9109'",
    "metricsAddress: '127.0.0.1:9109'", "reservedSystemCPUs: '0-1,08'",
])
def test_values_the_kubelet_takes_are_taken(text):
    parse_config(text + "\n")


def test_max_allowable_numa_nodes_beyond_int64_is_refused_as_gos_atoi_refuses_it():
    from nri_cpumgr.cm.topologymanager.options import parse_go_int

    assert parse_go_int(str(2**63 - 1)) == 2**63 - 1
    for text in ("99999999999999999999999", str(2**63), "١٢"):
        with pytest.raises(ValueError, match="out of range|invalid syntax"):
            parse_go_int(text)


@pytest.mark.parametrize("entries, want", [
    ("[{numaNode: 0, limits: {memory: 50Mi}}, {numaNode: 0, limits: {memory: 50Mi}}]",
     "reservedMemory.1.limits.memory: a second value for NUMA node 0 and 'memory' (the "
     "kubelet refuses a duplicate: one per node and resource)"),
    ("[{numaNode: 0, limits: {memory: 100Mi}}, {numaNode: 1, limits: {memory: '0'}}]",
     "reservedMemory.1.limits.memory: reserved memory may not be zero for NUMA node 1, as "
     "the kubelet says (leave it out)"),
    ("[{numaNode: 0, limits: {memory: 100Mi, hugepages-2Mi: 0Mi}}]",
     "reservedMemory.0.limits.hugepages-2Mi: reserved memory may not be zero for NUMA node 0"),
    ("[{numaNode: 0, limits: {memory: 100Mi, cpu: '1'}}]",
     "reservedMemory.0.limits.cpu: the limit type 'cpu' for NUMA node 0 is not supported (the "
     "kubelet takes only memory and hugepages-<size>)"),
])
@pytest.mark.parametrize("policy", ["Static", "None"])
def test_reserved_memory_is_checked_as_the_kubelet_checks_it(entries, want, policy):
    """The kubelet's validateReservedMemoryConfiguration (pkg/kubelet/apis/config/validation,
    v1.37.2), whatever the memoryManagerPolicy: a duplicate NUMA node and resource, a zero
    value, a limit other than memory and hugepages-<size> (all were taken)."""
    with pytest.raises(ConfigError) as ei:
        parse_config(f"memoryManagerPolicy: {policy}\nreservedMemory: {entries}\n")
    assert want in str(ei.value), str(ei.value)
    ok = parse_config("reservedMemory: [{numaNode: 0, limits: {memory: 50Mi}}, "
                      "{numaNode: 1, limits: {memory: 50Mi, hugepages-1Gi: 1Gi}}]\n")
    assert [r.numaNode for r in ok.reservedMemory] == [0, 1]
