// Package servetest starts a real `numaplace serve` for the Go test
// modules under adapters/kubernetes (the extender's and the one with a
// real kube-apiserver), so both drive the server the same way.
package servetest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"
)

// Serve starts numaplace serve with extra flags on a fresh SQLite
// database and registers two real hosts from the repository at root:
// corona (2-socket EPYC, 8 nodes, 96 threads) and quartz (2-socket Xeon,
// SMT off, 36 threads). It answers the server's base URL; the server is
// killed when the test ends. The binary is NUMAPLACE_BIN, else the debug
// build under root.
func Serve(t *testing.T, root string, flags ...string) string {
	t.Helper()
	bin := os.Getenv("NUMAPLACE_BIN")
	if bin == "" {
		bin = filepath.Join(root, "target", "debug", "numaplace")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("numaplace binary not found at %s (build it, or set NUMAPLACE_BIN)", bin)
	}
	args := append([]string{"serve", "--db", "sqlite:" + filepath.Join(t.TempDir(), "db"), "--listen", "127.0.0.1:0"}, flags...)
	cmd := exec.Command(bin, args...)
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
			} else if testing.Verbose() {
				t.Log("serve: " + sc.Text())
			}
		}
	}()
	var base string
	select {
	case base = <-urls:
	case <-time.After(20 * time.Second):
		t.Fatal("numaplace serve did not start")
	}
	for name, file := range map[string]string{"corona": "epyc-corona.xml", "quartz": "cts1-quartz-smt1.xml"} {
		body, err := os.ReadFile(filepath.Join(root, "fixtures", "topologies", "mpibind", file))
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest(http.MethodPut, base+"/v1/hosts/"+name, bytes.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("registering %s: %s", name, resp.Status)
		}
	}
	return base
}

// Post sends in as JSON and decodes the 200 answer strictly into out: a
// key the Go type lacks is the server speaking another protocol.
func Post(t *testing.T, url string, in, out any) {
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
	dec := json.NewDecoder(bytes.NewReader(text))
	dec.DisallowUnknownFields()
	if err := dec.Decode(out); err != nil {
		t.Fatalf("POST %s: decoding %s: %v", url, text, err)
	}
}
