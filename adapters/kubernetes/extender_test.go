// Package kubernetes tests numaplace serve's scheduler extender verbs with
// Kubernetes' own Go types: requests are marshalled from
// k8s.io/kube-scheduler/extender/v1 and k8s.io/api values, sent to a
// running server, and its answers decoded back into those types.
package kubernetes

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

var root = func() string { p, _ := filepath.Abs("../.."); return p }()

// server starts numaplace serve on a fresh SQLite database and registers
// two real hosts: corona (2-socket EPYC, 8 nodes, 96 threads) and quartz
// (2-socket Xeon, SMT off, 36 threads).
func server(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("NUMAPLACE_BIN")
	if bin == "" {
		bin = filepath.Join(root, "target", "debug", "numaplace")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("numaplace binary not found at %s (build it, or set NUMAPLACE_BIN)", bin)
	}
	dir := t.TempDir()
	cmd := exec.Command(bin, "serve", "--db", "sqlite:"+filepath.Join(dir, "db"), "--listen", "127.0.0.1:0")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	urls := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`listening on (http://\S+)`)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				urls <- m[1]
			}
		}
	}()
	var url string
	select {
	case url = <-urls:
	case <-time.After(20 * time.Second):
		t.Fatal("numaplace serve did not start")
	}
	for name, file := range map[string]string{"corona": "epyc-corona.xml", "quartz": "cts1-quartz-smt1.xml"} {
		body, err := os.ReadFile(filepath.Join(root, "fixtures", "topologies", "mpibind", file))
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest(http.MethodPut, url+"/v1/hosts/"+name, bytes.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("registering %s: %s", name, resp.Status)
		}
	}
	return url
}

func post(t *testing.T, url string, in, out any) {
	t.Helper()
	body, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	text, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %s %s", url, resp.Status, text)
	}
	// Strict: a key the Go type lacks is the server speaking another protocol.
	dec := json.NewDecoder(bytes.NewReader(text))
	dec.DisallowUnknownFields()
	if err := dec.Decode(out); err != nil {
		t.Fatalf("POST %s: decoding %s: %v", url, text, err)
	}
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
