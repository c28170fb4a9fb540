package kubernetes

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
)

// draCPUParameters is the DRA CPU driver's v1alpha1 opaque parameters
// (kubernetes-sigs/dra-driver-cpu, docs/user/opaque-cpuset-overrides.md):
// its module is not on the Go proxy here, so its two fields are declared
// as that page gives them, and decoded strictly.
type draCPUParameters struct {
	APIVersion string `json:"apiVersion"`
	CPUConfig  struct {
		CPUSet string `json:"cpuset"`
	} `json:"cpuConfig"`
}

// A claim placed by the service is handed to the DRA CPU driver as the
// allocation config entry a scheduler writes into the ResourceClaim: it
// decodes strictly into Kubernetes' own DeviceAllocationConfiguration,
// fits a ResourceClaim's status, and its opaque parameters carry exactly
// the placement's CPUs.
func TestAPlacementBecomesTheDRACPUDriversCpuset(t *testing.T) {
	url := server(t)
	resp, err := http.Post(url+"/v1/placements", "application/json",
		strings.NewReader(`{"name": "vms.db", "vcpus": 8, "memory": "16GiB", "constraints": {"hosts": ["corona"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	var placed struct {
		Placement struct{ Cpuset []int }
	}
	if err := json.NewDecoder(resp.Body).Decode(&placed); err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("placing: %s %v", resp.Status, err)
	}
	resp.Body.Close()
	resp, err = http.Get(url + "/v1/placements/vms.db?format=dra&request=vcpus")
	if err != nil {
		t.Fatal(err)
	}
	text, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("format=dra: %s %s", resp.Status, text)
	}
	var config resourcev1.DeviceAllocationConfiguration
	dec := json.NewDecoder(bytes.NewReader(text))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&config); err != nil {
		t.Fatalf("decoding %s: %v", text, err)
	}
	if config.Source != resourcev1.AllocationConfigSourceClaim || len(config.Requests) != 1 || config.Requests[0] != "vcpus" {
		t.Fatalf("source and requests: %+v", config)
	}
	if config.Opaque == nil || config.Opaque.Driver != "dra.cpu" {
		t.Fatalf("opaque: %+v", config.Opaque)
	}
	var params draCPUParameters
	dec = json.NewDecoder(bytes.NewReader(config.Opaque.Parameters.Raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&params); err != nil {
		t.Fatalf("parameters %s: %v", config.Opaque.Parameters.Raw, err)
	}
	if params.APIVersion != "v1alpha1" {
		t.Fatalf("apiVersion %q", params.APIVersion)
	}
	if got, want := expand(t, params.CPUConfig.CPUSet), placed.Placement.Cpuset; !equal(got, want) {
		t.Fatalf("cpuset %q is %v, the placement holds %v", params.CPUConfig.CPUSet, got, want)
	}
	// It is what a ResourceClaim's allocation carries.
	claim := resourcev1.ResourceClaim{Status: resourcev1.ResourceClaimStatus{Allocation: &resourcev1.AllocationResult{
		Devices: resourcev1.DeviceAllocationResult{Config: []resourcev1.DeviceAllocationConfiguration{config}},
	}}}
	if _, err := json.Marshal(claim); err != nil {
		t.Fatal(err)
	}
	// A floating VM holds no CPUs of its own: refused, with the reason.
	resp, err = http.Post(url+"/v1/placements", "application/json",
		strings.NewReader(`{"name": "vms.web", "vcpus": 2, "memory": "1GiB", "cpu": "shared"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	resp, err = http.Get(url + "/v1/placements/vms.web?format=dra")
	if err != nil {
		t.Fatal(err)
	}
	text, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(text), "holds none of its own") {
		t.Fatalf("a floating VM: %s %s", resp.Status, text)
	}
}

// expand reads a Linux CPU list ("2-5,8").
func expand(t *testing.T, list string) []int {
	t.Helper()
	var out []int
	for _, part := range strings.Split(list, ",") {
		var a, b int
		if n, _ := fmt.Sscanf(part, "%d-%d", &a, &b); n == 2 {
			for c := a; c <= b; c++ {
				out = append(out, c)
			}
		} else if n == 1 {
			out = append(out, a)
		} else {
			t.Fatalf("not a CPU list: %q", list)
		}
	}
	return out
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
