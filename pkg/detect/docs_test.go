package detect_test

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
)

// The generated detectors section states exactly the defaults: decoded
// strictly, it is DefaultConfig, and every setting has a line.
func TestSettingsYAMLStatesTheDefaults(t *testing.T) {
	reg := detect.Registry()
	doc := reg.SettingsYAML()
	var file struct {
		Detectors detect.Config `yaml:"detectors"`
	}
	dec := yaml.NewDecoder(strings.NewReader(doc))
	dec.KnownFields(true)
	if err := dec.Decode(&file); err != nil {
		t.Fatalf("%v in:\n%s", err, doc)
	}
	if !reflect.DeepEqual(file.Detectors, reg.DefaultConfig()) {
		t.Errorf("the generated section is not the defaults:\n%s", doc)
	}
	// Durations are written as they are configured.
	for _, want := range []string{"\n  preempt_storm:\n", "\n    range: 2m  ", "\n    baseline: 1h  ", "\n    slow_inter_token: 200ms  ", "\n  triage:\n"} {
		if !strings.Contains(doc, want) {
			t.Errorf("no %q in:\n%s", want, doc)
		}
	}
	for _, line := range strings.Split(doc, "\n") {
		if len(line) > 78 && strings.HasPrefix(strings.TrimSpace(line), "#") {
			t.Errorf("a comment line longer than 78 columns: %q", line)
		}
	}
}

func TestClassTableHasARowPerDetector(t *testing.T) {
	reg := detect.Registry()
	rows := strings.Split(strings.TrimSuffix(reg.ClassTable(), "\n"), "\n")
	if len(rows) != 2+len(reg) {
		t.Fatalf("%d lines for %d detectors", len(rows), len(reg))
	}
	for i, e := range reg {
		var sev []string
		for _, s := range e.Severities() {
			sev = append(sev, s.String())
		}
		if want := "| `" + string(e.Class()) + "` | " + strings.Join(sev, ", ") + " | "; !strings.HasPrefix(rows[2+i], want) {
			t.Errorf("row %q, want it to start %q", rows[2+i], want)
		}
		if strings.Count(rows[2+i], " | ") != 3 {
			t.Errorf("row %q does not have four cells", rows[2+i])
		}
	}
}

// The settings tables of docs/configuration.md have a row for every
// setting the generated YAML section has, with its default, in the
// section of its detector ("enabled" only where it is off by default).
func TestSettingsTablesListEverySetting(t *testing.T) {
	reg := detect.Registry()
	var file struct {
		Detectors map[string]map[string]any `yaml:"detectors"`
	}
	if err := yaml.Unmarshal([]byte(reg.SettingsYAML()), &file); err != nil {
		t.Fatal(err)
	}
	tables := "\n" + reg.SettingsTables()
	for section, settings := range file.Detectors {
		start := strings.Index(tables, "\n`"+section+"`: ")
		if start < 0 {
			t.Errorf("no table for %s", section)
			continue
		}
		table := tables[start+1:]
		if end := strings.Index(table, "\n\n`"); end >= 0 {
			table = table[:end]
		}
		for key, value := range settings {
			row := "\n| `" + key + "` | "
			if _, nested := value.(map[string]any); !nested {
				row += "`" + strings.ReplaceAll(fmt.Sprint(value), "|", `\|`) + "`"
			}
			if has := strings.Contains(table, row); has != (key != "enabled" || value != true) {
				t.Errorf("%s: row %q present: %v", section, row, has)
			}
		}
	}
}
