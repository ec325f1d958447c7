package detect

import (
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// Nested settings (a struct field) are decoded as strictly as the top
// level of a section.
func TestDecodeSectionRejectsUnknownNestedKeys(t *testing.T) {
	type inner struct {
		Share float64 `yaml:"share"`
	}
	type section struct {
		Range string `yaml:"range"`
		Inner inner  `yaml:"inner"`
	}
	var n yaml.Node
	if err := yaml.Unmarshal([]byte("range: 1m\ninner:\n  share: 0.5\n  shar: 0.1\n"), &n); err != nil {
		t.Fatal(err)
	}
	s := section{Range: "2m"}
	problems := decodeSection(&s, "detectors.x", n.Content[0])
	if len(problems) != 1 || !strings.Contains(problems[0], "line 4: detectors.x.inner.shar: no such field") {
		t.Errorf("problems %q", problems)
	}
	if s.Range != "1m" || s.Inner.Share != 0.5 {
		t.Errorf("decoded %+v", s)
	}
}
