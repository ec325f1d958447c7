package main

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
)

// TestREADMEDetectorTableMatchesTheRegistry: the README's table of
// incident classes lists every detector once, with exactly the severities
// it can emit.
func TestREADMEDetectorTableMatchesTheRegistry(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\| ([a-z, ]+) \\|")
	documented := map[string]string{}
	for _, m := range row.FindAllStringSubmatch(string(b), -1) {
		if _, dup := documented[m[1]]; dup {
			t.Errorf("README lists %s twice", m[1])
		}
		documented[m[1]] = m[2]
	}
	for _, e := range detect.Registry() {
		var want []string
		for _, s := range e.Severities() {
			want = append(want, s.String())
		}
		got, ok := documented[string(e.Class())]
		if !ok {
			t.Errorf("README's detector table lacks %s", e.Class())
			continue
		}
		gotList := strings.Split(got, ", ")
		slices.Sort(gotList)
		slices.Sort(want)
		if !slices.Equal(gotList, want) {
			t.Errorf("README says %s pages %v; the detector emits %v", e.Class(), gotList, want)
		}
		delete(documented, string(e.Class()))
	}
	for c := range documented {
		t.Errorf("README lists %s, which is no detector", c)
	}
}
