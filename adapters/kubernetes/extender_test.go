// Package kubernetes tests numaplace serve's scheduler extender verbs with
// Kubernetes' own Go types: requests are marshalled from
// k8s.io/kube-scheduler/extender/v1 and k8s.io/api values, sent to a
// running server, and its answers decoded back into those types.
package kubernetes

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"numaplace.example/kubernetes/servetest"
)

var root = func() string { p, _ := filepath.Abs("../.."); return p }()

// server starts numaplace serve on a fresh SQLite database with corona
// and quartz registered (servetest.Serve).
func server(t *testing.T) string {
	t.Helper()
	return servetest.Serve(t, root)
}

func post(t *testing.T, url string, in, out any) {
	t.Helper()
	servetest.Post(t, url, in, out)
}

// pod is a Guaranteed pod (requests equal to limits) of cpus CPUs and mem.
func pod(name string, cpus int, mem string, extra v1.ResourceList) *v1.Pod {
	limits := v1.ResourceList{
		v1.ResourceCPU:    *resource.NewQuantity(int64(cpus), resource.DecimalSI),
		v1.ResourceMemory: resource.MustParse(mem),
	}
	for k, v := range extra {
		limits[k] = v
	}
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "vms", UID: types.UID("uid-" + name)},
		Spec: v1.PodSpec{Containers: []v1.Container{{
			Name:      "compute",
			Resources: v1.ResourceRequirements{Limits: limits, Requests: limits},
		}}},
	}
}

func names(n ...string) *[]string { return &n }

func TestFilterPassesTheNodesThatFitAndNamesTheReasonForTheRest(t *testing.T) {
	url := server(t)
	var res extenderv1.ExtenderFilterResult
	post(t, url+"/v1/k8s/filter", extenderv1.ExtenderArgs{Pod: pod("small", 4, "8Gi", nil), NodeNames: names("corona", "quartz")}, &res)
	if res.NodeNames == nil || strings.Join(*res.NodeNames, ",") != "corona,quartz" || res.Error != "" {
		t.Fatalf("small pod: %+v", res)
	}
	// 40 dedicated CPUs: quartz has 36 threads.
	res = extenderv1.ExtenderFilterResult{}
	post(t, url+"/v1/k8s/filter", extenderv1.ExtenderArgs{Pod: pod("big", 40, "64Gi", nil), NodeNames: names("corona", "quartz")}, &res)
	if strings.Join(*res.NodeNames, ",") != "corona" {
		t.Fatalf("big pod passed %v", *res.NodeNames)
	}
	if why := res.FailedAndUnresolvableNodes["quartz"]; !strings.Contains(why, "short-threads") || !strings.Contains(why, "needs 40 free CPU threads, has 36") {
		t.Fatalf("quartz's reason: %q", why)
	}
}

func TestAPodThatFitsNoNodeGetsEveryNodesReasonAsUnresolvable(t *testing.T) {
	url := server(t)
	var res extenderv1.ExtenderFilterResult
	post(t, url+"/v1/k8s/filter", extenderv1.ExtenderArgs{Pod: pod("huge", 200, "64Gi", nil), NodeNames: names("corona", "quartz", "gone")}, &res)
	if len(*res.NodeNames) != 0 || len(res.FailedNodes) != 0 {
		t.Fatalf("huge pod: %+v", res)
	}
	for node, code := range map[string]string{"corona": "short-threads", "quartz": "short-threads", "gone": "unknown-host"} {
		if why := res.FailedAndUnresolvableNodes[node]; !strings.Contains(why, code) {
			t.Errorf("%s: reason %q lacks %s", node, why, code)
		}
	}
	// A KubeVirt launcher pod asking for 1 GiB pages these hosts lack.
	p := pod("virt-launcher-db-x7k2", 4, "9Gi", v1.ResourceList{"hugepages-1Gi": resource.MustParse("8Gi")})
	p.Labels = map[string]string{"kubevirt.io": "virt-launcher"}
	res = extenderv1.ExtenderFilterResult{}
	post(t, url+"/v1/k8s/filter", extenderv1.ExtenderArgs{Pod: p, NodeNames: names("corona")}, &res)
	if why := res.FailedAndUnresolvableNodes["corona"]; !strings.Contains(strings.ToLower(why), "huge") {
		t.Fatalf("hugepage pod on corona: %q", why)
	}
}

func TestFilterAnswersWholeNodesWhenSentWholeNodes(t *testing.T) {
	url := server(t)
	list := &v1.NodeList{Items: []v1.Node{
		{ObjectMeta: metav1.ObjectMeta{Name: "corona", Labels: map[string]string{"zone": "a"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "quartz"}},
	}}
	var res extenderv1.ExtenderFilterResult
	post(t, url+"/v1/k8s/filter", extenderv1.ExtenderArgs{Pod: pod("big", 40, "64Gi", nil), Nodes: list}, &res)
	if res.Nodes == nil || len(res.Nodes.Items) != 1 || res.Nodes.Items[0].Name != "corona" || res.Nodes.Items[0].Labels["zone"] != "a" {
		t.Fatalf("nodes back: %+v", res.Nodes)
	}
}

func TestPrioritizeScoresHighestTheNodeTheServiceWouldChoose(t *testing.T) {
	url := server(t)
	p := pod("web", 16, "32Gi", nil)
	var list extenderv1.HostPriorityList
	post(t, url+"/v1/k8s/prioritize", extenderv1.ExtenderArgs{Pod: p, NodeNames: names("quartz", "corona")}, &list)
	if len(list) != 2 {
		t.Fatalf("priorities: %+v", list)
	}
	best := list[0]
	for _, h := range list {
		if h.Score < 0 || h.Score > extenderv1.MaxExtenderPriority {
			t.Fatalf("score out of 0-10: %+v", h)
		}
		if h.Score > best.Score {
			best = h
		}
	}
	// The service's own decision among the same nodes, changing nothing.
	body := fmt.Sprintf(`{"name": "vms.web", "vcpus": 16, "memory": "32GiB", "constraints": {"hosts": ["quartz", "corona"]}}`)
	resp, err := http.Post(url+"/v1/placements?dry_run=true", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var placed struct{ Host string }
	if err := json.NewDecoder(resp.Body).Decode(&placed); err != nil {
		t.Fatal(err)
	}
	if best.Host != placed.Host || best.Score != extenderv1.MaxExtenderPriority {
		t.Fatalf("highest %+v, the service chooses %s", best, placed.Host)
	}
}
