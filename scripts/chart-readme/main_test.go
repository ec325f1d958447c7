package main

import (
	"os"
	"strings"
	"testing"
)

const chart = "../../deploy/helm/sglang-watchdog"

// Every top-level value of the chart is documented: the table rendered
// from values.yaml has a row for it (a `# --` comment on it or its keys).
func TestEveryChartValueIsDocumented(t *testing.T) {
	values, err := os.ReadFile(chart + "/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := render(values, []byte(startMarker+"\n"+endMarker+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(values), "\n") {
		if key, _, ok := strings.Cut(line, ":"); ok && key != "" && !strings.HasPrefix(key, " ") && !strings.HasPrefix(key, "#") {
			if !strings.Contains(string(readme), "| `"+key) {
				t.Errorf("value %s has no row in the README (a `# --` comment on it or its keys)", key)
			}
		}
	}
}

func TestRenderTable(t *testing.T) {
	values := "# -- The mode.\n# Second line | piped.\nmode: single\nimage:\n  # -- Tag.\n  tag: \"\"\n  undocumented: 1\n# -- Ports.\nports: [1, 2]\n"
	readme := "# Chart\n<!-- values:start -->\nold\n<!-- values:end -->\ntail\n"
	got, err := render([]byte(values), []byte(readme))
	if err != nil {
		t.Fatal(err)
	}
	want := "# Chart\n<!-- values:start -->\n| Key | Type | Default | Description |\n| --- | --- | --- | --- |\n" +
		"| `mode` | string | `\"single\"` | The mode. Second line \\| piped. |\n" +
		"| `image.tag` | string | `\"\"` | Tag. |\n" +
		"| `ports` | list | `[1,2]` | Ports. |\n" +
		"<!-- values:end -->\ntail\n"
	if string(got) != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	if _, err := render([]byte(values), []byte("no markers")); err == nil {
		t.Error("a README without markers was accepted")
	}
}
