package main

import (
	"strings"
	"testing"
)

func TestExtract(t *testing.T) {
	stream := `apiVersion: v1
kind: ConfigMap
metadata: {name: other}
data: {x: "1"}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: sglang-watchdog-config}
data:
  watchdog.yaml: |
    scrape:
      interval: 5s
---
apiVersion: v1
kind: Service
metadata: {name: s}
`
	got, err := extract(strings.NewReader(stream))
	if err != nil || string(got) != "scrape:\n  interval: 5s\n" {
		t.Errorf("got %q, %v", got, err)
	}
	if _, err := extract(strings.NewReader("kind: Service\n")); err == nil {
		t.Error("a stream without the config was accepted")
	}
	if _, err := extract(strings.NewReader(stream + "---\n" + stream)); err == nil {
		t.Error("two configs were accepted")
	}
}
