// Package apiserver tests numaplace serve's scheduler extender against a
// real kube-apiserver: Kubernetes' own (k8s.io/kubernetes, the test
// server kube-apiserver's integration tests use) started in this process
// on an embedded etcd, with KubeVirt's VirtualMachineInstance CRD
// installed. A module of its own: importing k8s.io/kubernetes needs every
// staging module replaced by its published version (go.mod), which the
// extender's lighter test module does not need.
package apiserver

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	kubeapiservertesting "k8s.io/kubernetes/cmd/kube-apiserver/app/testing"

	"numaplace.example/kubernetes/servetest"
)

var root = func() string { p, _ := filepath.Abs("../../.."); return p }()

// cluster is a running kube-apiserver: its URL, a client of it, and the
// files numaplace serve is given (--kube-token-file, --kube-ca-file).
type cluster struct {
	url       string
	config    *rest.Config
	client    kubernetes.Interface
	dynamic   dynamic.Interface
	tokenFile string
	caFile    string
}

// startCluster starts etcd (embedded) and kube-apiserver, serving on
// 127.0.0.1 with a certificate of a CA written for numaplace, and a
// static bearer token in system:masters for numaplace to call it with.
func startCluster(t *testing.T) *cluster {
	t.Helper()
	dir := t.TempDir()

	cfg := embed.NewConfig()
	cfg.Dir = filepath.Join(dir, "etcd")
	loop, _ := url.Parse("http://127.0.0.1:0")
	cfg.ListenClientUrls = []url.URL{*loop}
	cfg.AdvertiseClientUrls = []url.URL{*loop}
	cfg.ListenPeerUrls = []url.URL{*loop}
	cfg.LogLevel = "error"
	// Its shutdown errors ("server closed") are noise on the test's stderr.
	cfg.LogOutputs = []string{filepath.Join(dir, "etcd.log")}
	etcd, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatalf("starting the embedded etcd: %v", err)
	}
	t.Cleanup(etcd.Close)
	select {
	case <-etcd.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		t.Fatal("the embedded etcd did not become ready")
	}

	caFile, certFile, keyFile := servingCert(t, dir)
	token := "numaplace-test-token-0123456789abcdef"
	tokenFile := filepath.Join(dir, "token")
	write(t, tokenFile, token+"\n")
	tokens := filepath.Join(dir, "tokens.csv")
	write(t, tokens, token+",numaplace,numaplace-uid,\"system:masters\"\n")

	storage := storagebackend.NewDefaultConfig("/registry", nil)
	storage.Transport.ServerList = []string{"http://" + etcd.Clients[0].Addr().String()}
	server := kubeapiservertesting.StartTestServerOrDie(t, nil, []string{
		// No controllers run: nothing reconciles endpoints or mints
		// service-account tokens.
		"--endpoint-reconciler-type=none",
		"--disable-admission-plugins=ServiceAccount",
		"--token-auth-file=" + tokens,
		"--tls-cert-file=" + certFile,
		"--tls-private-key-file=" + keyFile,
	}, storage)
	t.Cleanup(server.TearDownFn)

	c := &cluster{url: server.ClientConfig.Host, config: server.ClientConfig, tokenFile: tokenFile, caFile: caFile}
	c.client = kubernetes.NewForConfigOrDie(server.ClientConfig)
	c.dynamic = dynamic.NewForConfigOrDie(server.ClientConfig)
	installVMICRD(t, server.ClientConfig)
	return c
}

func write(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

// servingCert writes a CA and a certificate it signed for 127.0.0.1 and
// localhost: the apiserver serves it, numaplace checks it against the CA.
func servingCert(t *testing.T, dir string) (caFile, certFile, keyFile string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "numaplace-test-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "kube-apiserver"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	caFile, certFile, keyFile = filepath.Join(dir, "ca.crt"), filepath.Join(dir, "apiserver.crt"), filepath.Join(dir, "apiserver.key")
	write(t, caFile, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})))
	write(t, certFile, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
	write(t, keyFile, string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})))
	return
}

// installVMICRD installs virtualmachineinstances.kubevirt.io (v1) as
// KubeVirt's operator does, its schema open (KubeVirt's own is thousands
// of lines; the apiserver keeps every field either way).
func installVMICRD(t *testing.T, config *rest.Config) {
	t.Helper()
	open := true
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "virtualmachineinstances.kubevirt.io"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "kubevirt.io",
			Names: apiextensionsv1.CustomResourceDefinitionNames{
				Plural: "virtualmachineinstances", Singular: "virtualmachineinstance",
				Kind: "VirtualMachineInstance", ListKind: "VirtualMachineInstanceList", ShortNames: []string{"vmi", "vmis"},
			},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: &open,
				}},
			}},
		},
	}
	client := apiextensionsclient.NewForConfigOrDie(config)
	ctx := context.Background()
	if _, err := client.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the VMI CRD: %v", err)
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := client.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range got.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("the VMI CRD was not established: %v", err)
	}
}

// serve starts numaplace serve with extra flags (servetest.Serve: a
// fresh SQLite database, corona and quartz registered).
func serve(t *testing.T, flags ...string) string {
	t.Helper()
	return servetest.Serve(t, root, flags...)
}

// post sends in as JSON and decodes the 200 answer strictly into out.
func post(t *testing.T, url string, in, out any) {
	t.Helper()
	servetest.Post(t, url, in, out)
}

// get answers a GET's status and body.
func get(t *testing.T, url string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, body
}
