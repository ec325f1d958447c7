package runbook

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestEveryCoreClassHasARunbookWithStepsServedAsHTML(t *testing.T) {
	b, err := New()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(b)
	defer srv.Close()
	for _, class := range []string{"preempt_storm", "retry_avalanche", "cache_collapse", "replica_down"} {
		src, ok := b.Markdown(class)
		if !ok {
			t.Errorf("%s: no runbook", class)
			continue
		}
		for _, section := range []string{"## Emergency steps", "## Root-cause fixes", "## How the watchdog decided"} {
			if !strings.Contains(src, section) {
				t.Errorf("%s: missing %q", class, section)
			}
		}
		resp, err := http.Get(srv.URL + "/runbooks/" + class)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("Content-Type"), "text/html") || !strings.Contains(string(body), "<h2>Emergency steps</h2>") {
			t.Errorf("%s: status %d, body %.200s", class, resp.StatusCode, body)
		}
	}
	resp, err := http.Get(srv.URL + "/runbooks/%3Cscript%3E")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("unknown class: status %d", resp.StatusCode)
	}
}
