"""The one ResourceList parser (nri_cpumgr.podmodel.model.parse_resource_list) and the errors
its two callers make of its failures: the pod spec facts (ValueError) and the planner's
manifests (ManifestError), each naming the field its own way."""

from __future__ import annotations

import pytest

from nri_cpumgr.planner.manifest import ManifestError, load_pods
from nri_cpumgr.podmodel import ResourceListError, parse_resource_list
from nri_cpumgr.podmodel.spec import facts_from_pod


def test_units_cpu_in_millicores_the_rest_as_given():
    assert parse_resource_list(None) == {}
    assert parse_resource_list({"cpu": "1500m", "memory": "1Gi", "hugepages-2Mi": "4Mi",
                                "example.com/gpu": 2}) == {
        "cpu": 1500, "memory": 1 << 30, "hugepages-2Mi": 4 << 20, "example.com/gpu": 2}
    assert parse_resource_list({"cpu": 2}) == {"cpu": 2000}


def test_errors_carry_the_key_and_the_value():
    with pytest.raises(ResourceListError, match="^expected a mapping, got list$") as ei:
        parse_resource_list(["cpu"])
    assert ei.value.key is None and ei.value.value == ["cpu"]
    with pytest.raises(ResourceListError, match="^invalid quantity 'lots'$") as ei:
        parse_resource_list({"memory": "1Gi", "cpu": "lots"})
    assert ei.value.key == "cpu" and ei.value.value == "lots"
    assert isinstance(ei.value, ValueError)


def _pod(resources):
    return {"metadata": {"uid": "u"},
            "spec": {"containers": [{"name": "c", "resources": resources}]}}


@pytest.mark.parametrize("resources, message", [
    ({"limits": ["cpu"]}, "spec.containers[0].resources.limits: expected a mapping, got list"),
    ({"requests": {"cpu": "lots"}},
     "spec.containers[0].resources.requests.cpu: invalid quantity 'lots'"),
])
def test_pod_spec_facts_name_the_field(resources, message):
    with pytest.raises(ValueError) as ei:
        facts_from_pod(_pod(resources))
    assert type(ei.value) is ValueError and str(ei.value) == message


@pytest.mark.parametrize("resources, message", [
    ("{limits: [cpu]}",
     "f.yaml document 1: pod p containers: c: resources.limits: expected a mapping, "
     "got a list (['cpu'])"),
    ("{requests: {cpu: true}}",
     "f.yaml document 1: pod p containers: c: resources.requests.cpu: invalid quantity True"),
])
def test_manifest_errors_name_the_document_and_field(resources, message):
    text = f"kind: Pod\nmetadata: {{name: p}}\nspec:\n  containers:\n  - name: c\n" \
           f"    resources: {resources}\n"
    with pytest.raises(ManifestError) as ei:
        load_pods(text, "f.yaml")
    assert str(ei.value) == message
