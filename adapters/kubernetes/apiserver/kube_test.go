package apiserver

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
)

var vmis = schema.GroupVersionResource{Group: "kubevirt.io", Version: "v1", Resource: "virtualmachineinstances"}

// createVMI stores a VirtualMachineInstance made with KubeVirt's own Go
// types, and answers it as the apiserver stored it (its UID).
func (c *cluster) createVMI(t *testing.T, vmi *kubevirtv1.VirtualMachineInstance) *unstructured.Unstructured {
	t.Helper()
	vmi.TypeMeta = metav1.TypeMeta{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachineInstance"}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(vmi)
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.dynamic.Resource(vmis).Namespace(vmi.Namespace).Create(context.Background(), &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating VMI %s: %v", vmi.Name, err)
	}
	return got
}

// launcher creates the pod KubeVirt's virt-controller would make for a
// VMI: labelled kubevirt.io=virt-launcher, owned by the VMI, its small
// resources NOT the VMI's size (so an answer sized like the VMI shows the
// VMI was read). nodeName set: a pod already bound.
func (c *cluster) launcher(t *testing.T, vmi *unstructured.Unstructured, name, nodeName string) *corev1.Pod {
	t.Helper()
	yes := true
	res := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: vmi.GetNamespace(),
			Labels: map[string]string{
				kubevirtv1.AppLabel: "virt-launcher", kubevirtv1.CreatedByLabel: string(vmi.GetUID()),
				kubevirtv1.DeprecatedVirtualMachineNameLabel: vmi.GetName(),
			},
			Annotations: map[string]string{kubevirtv1.DomainAnnotation: vmi.GetName()},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "kubevirt.io/v1", Kind: "VirtualMachineInstance", Name: vmi.GetName(), UID: vmi.GetUID(),
				Controller: &yes, BlockOwnerDeletion: &yes,
			}},
		},
		Spec: corev1.PodSpec{
			NodeName: nodeName,
			Containers: []corev1.Container{{
				Name: "compute", Image: "quay.io/kubevirt/virt-launcher:v1.7.0",
				Resources: corev1.ResourceRequirements{Requests: res, Limits: res},
			}},
		},
	}
	got, err := c.client.CoreV1().Pods(pod.Namespace).Create(context.Background(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating pod %s: %v", name, err)
	}
	return got
}

func dedicatedVMI(name string, sockets, cores, threads uint32) *kubevirtv1.VirtualMachineInstance {
	guest := resource.MustParse("8Gi")
	return &kubevirtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "vms"},
		Spec: kubevirtv1.VirtualMachineInstanceSpec{Domain: kubevirtv1.DomainSpec{
			CPU: &kubevirtv1.CPU{
				Sockets: sockets, Cores: cores, Threads: threads, DedicatedCPUPlacement: true,
				NUMA: &kubevirtv1.NUMA{GuestMappingPassthrough: &kubevirtv1.NUMAGuestMappingPassthrough{}},
			},
			Memory: &kubevirtv1.Memory{Guest: &guest},
		}},
	}
}

// placement reads numaplace's placement of a VM: its host and pinned vCPUs, or
// the HTTP status when there is none.
func placement(t *testing.T, base, vm string) (host string, vcpus int, status int) {
	t.Helper()
	status, body := get(t, base+"/v1/placements/"+vm)
	if status != 200 {
		return "", 0, status
	}
	var doc struct {
		Host      string `json:"host"`
		Placement struct {
			Pins []json.RawMessage `json:"pins"`
		} `json:"placement"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatalf("placement %s: %v in %s", vm, err, body)
	}
	return doc.Host, len(doc.Placement.Pins), status
}

func TestTheExtenderReadsTheVMIAndBindsThroughARealAPIServer(t *testing.T) {
	c := startCluster(t)
	ctx := context.Background()
	if _, err := c.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "vms"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	base := serve(t, "--kube-api", c.url, "--kube-token-file", c.tokenFile, "--kube-ca-file", c.caFile)
	nodes := []string{"corona", "quartz"}

	// 2 sockets x 20 cores, dedicated, guest NUMA passthrough: 40 pinned
	// vCPUs. quartz has 36 CPUs; the pod's own resources (1 CPU) would
	// fit both nodes.
	big := c.createVMI(t, dedicatedVMI("big", 2, 20, 1))
	bigPod := c.launcher(t, big, "virt-launcher-big-abcde", "")

	t.Run("filter sizes the pod by its VMI", func(t *testing.T) {
		var res extenderv1.ExtenderFilterResult
		post(t, base+"/v1/k8s/filter", extenderv1.ExtenderArgs{Pod: bigPod, NodeNames: &nodes}, &res)
		if res.NodeNames == nil || strings.Join(*res.NodeNames, ",") != "corona" {
			t.Fatalf("40 dedicated vCPUs: expected corona only, got %+v", res)
		}
		if why := res.FailedAndUnresolvableNodes["quartz"]; !strings.HasPrefix(why, "numaplace ") {
			t.Fatalf("quartz: expected numaplace's reason, got %q", why)
		}
	})

	t.Run("a VMI field numaplace cannot honour refuses every node by name", func(t *testing.T) {
		odd := c.createVMI(t, dedicatedVMI("smt4", 1, 2, 4))
		pod := c.launcher(t, odd, "virt-launcher-smt4-fghij", "")
		var res extenderv1.ExtenderFilterResult
		post(t, base+"/v1/k8s/filter", extenderv1.ExtenderArgs{Pod: pod, NodeNames: &nodes}, &res)
		if len(*res.NodeNames) != 0 || len(res.FailedAndUnresolvableNodes) != 2 {
			t.Fatalf("threads: 4: expected every node refused, got %+v", res)
		}
		for node, why := range res.FailedAndUnresolvableNodes {
			if !strings.Contains(why, "vmi-threads") || !strings.Contains(why, "spec.domain.cpu.threads") {
				t.Fatalf("%s: expected the vmi-threads reason naming the field, got %q", node, why)
			}
		}
	})

	t.Run("a launcher pod whose VMI is gone falls back to its resources", func(t *testing.T) {
		ghost := c.createVMI(t, dedicatedVMI("ghost", 2, 20, 1))
		pod := c.launcher(t, ghost, "virt-launcher-ghost-klmno", "")
		if err := c.dynamic.Resource(vmis).Namespace("vms").Delete(ctx, "ghost", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		var res extenderv1.ExtenderFilterResult
		post(t, base+"/v1/k8s/filter", extenderv1.ExtenderArgs{Pod: pod, NodeNames: &nodes}, &res)
		if strings.Join(*res.NodeNames, ",") != "corona,quartz" {
			t.Fatalf("1 CPU from the pod's resources: expected both nodes, got %+v", res)
		}
	})

	t.Run("bind claims the VMI's placement and binds the pod", func(t *testing.T) {
		var res extenderv1.ExtenderBindingResult
		post(t, base+"/v1/k8s/bind", extenderv1.ExtenderBindingArgs{
			PodName: bigPod.Name, PodNamespace: bigPod.Namespace, PodUID: bigPod.UID, Node: "corona",
		}, &res)
		if res.Error != "" {
			t.Fatalf("bind: %s", res.Error)
		}
		got, err := c.client.CoreV1().Pods("vms").Get(ctx, bigPod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Spec.NodeName != "corona" {
			t.Fatalf("the apiserver has the pod on %q, not corona", got.Spec.NodeName)
		}
		host, vcpus, status := placement(t, base, "vms."+bigPod.Name)
		if status != 200 || host != "corona" || vcpus != 40 {
			t.Fatalf("the service's claim: status %d host %q vcpus %d, expected corona with the VMI's 40", status, host, vcpus)
		}
		// The scheduler sending it again (its answer lost) binds nothing twice.
		res = extenderv1.ExtenderBindingResult{}
		post(t, base+"/v1/k8s/bind", extenderv1.ExtenderBindingArgs{
			PodName: bigPod.Name, PodNamespace: bigPod.Namespace, PodUID: bigPod.UID, Node: "corona",
		}, &res)
		if res.Error != "" {
			t.Fatalf("bind sent again: %s", res.Error)
		}
	})

	t.Run("a bind the API refuses releases the claim", func(t *testing.T) {
		small := c.createVMI(t, dedicatedVMI("small", 1, 4, 1))
		// Already on quartz: the apiserver refuses a Binding to corona.
		pod := c.launcher(t, small, "virt-launcher-small-pqrst", "quartz")
		var res extenderv1.ExtenderBindingResult
		post(t, base+"/v1/k8s/bind", extenderv1.ExtenderBindingArgs{
			PodName: pod.Name, PodNamespace: pod.Namespace, PodUID: pod.UID, Node: "corona",
		}, &res)
		if !strings.Contains(res.Error, "409") || !strings.Contains(res.Error, "released") {
			t.Fatalf("expected the apiserver's 409 and the claim released, got %q", res.Error)
		}
		if _, _, status := placement(t, base, "vms."+pod.Name); status != 404 {
			t.Fatalf("the claim was kept (GET placement: %d)", status)
		}
	})

	t.Run("a pod's own kept claim is its first node and its bind completes on it", func(t *testing.T) {
		kept := c.createVMI(t, dedicatedVMI("kept", 1, 4, 1))
		pod := c.launcher(t, kept, "virt-launcher-kept-uvwxy", "")
		vm := "vms." + pod.Name
		// The claim a bind keeps when its Binding goes unanswered (which a
		// real apiserver cannot be made to do on demand), made here through
		// the service's API: on quartz, not the service's own choice.
		claim := `{"name":"` + vm + `","vcpus":4,"memory":"8GiB","constraints":{"hosts":["quartz"]}}`
		resp, err := http.Post(base+"/v1/placements", "application/json", strings.NewReader(claim))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("the kept claim: %s", resp.Status)
		}
		var res extenderv1.ExtenderFilterResult
		post(t, base+"/v1/k8s/filter", extenderv1.ExtenderArgs{Pod: pod, NodeNames: &nodes}, &res)
		if res.NodeNames == nil || !strings.Contains(","+strings.Join(*res.NodeNames, ",")+",", ",quartz,") {
			t.Fatalf("expected quartz, the node of the pod's own claim, passed; got %+v", res)
		}
		var scores extenderv1.HostPriorityList
		post(t, base+"/v1/k8s/prioritize", extenderv1.ExtenderArgs{Pod: pod, NodeNames: &nodes}, &scores)
		for _, s := range scores {
			if (s.Host == "quartz") != (s.Score == 10) {
				t.Fatalf("expected 10 for quartz alone, got %+v", scores)
			}
		}
		var bound extenderv1.ExtenderBindingResult
		post(t, base+"/v1/k8s/bind", extenderv1.ExtenderBindingArgs{
			PodName: pod.Name, PodNamespace: pod.Namespace, PodUID: pod.UID, Node: "quartz",
		}, &bound)
		if bound.Error != "" {
			t.Fatalf("bind on the kept claim: %s", bound.Error)
		}
		got, err := c.client.CoreV1().Pods("vms").Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Spec.NodeName != "quartz" {
			t.Fatalf("the apiserver has the pod on %q, not quartz", got.Spec.NodeName)
		}
		if host, vcpus, status := placement(t, base, vm); status != 200 || host != "quartz" || vcpus != 4 {
			t.Fatalf("the claim: status %d host %q vcpus %d, expected the kept one on quartz", status, host, vcpus)
		}
	})

	t.Run("a pod recreated under its name is not bound", func(t *testing.T) {
		var res extenderv1.ExtenderBindingResult
		post(t, base+"/v1/k8s/bind", extenderv1.ExtenderBindingArgs{
			PodName: bigPod.Name, PodNamespace: "vms", PodUID: "00000000-0000-0000-0000-000000000000", Node: "corona",
		}, &res)
		if !strings.Contains(res.Error, "recreated") {
			t.Fatalf("a stale UID: expected a refusal, got %q", res.Error)
		}
	})
}
