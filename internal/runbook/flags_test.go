package runbook

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
)

// Every flag on the list is well formed, listed once, and says whose it
// is and where it was verified.
func TestFlagsAreCited(t *testing.T) {
	wellFormed := regexp.MustCompile(`^--[a-z][a-z0-9]*(-[a-z0-9]+)*$`)
	seen := map[string]bool{}
	for _, f := range Flags() {
		if !wellFormed.MatchString(f.Name) || f.Tool == "" || f.Source == "" {
			t.Errorf("flag %+v: want a --name, its tool and its source", f)
		}
		if seen[f.Name] {
			t.Errorf("%s listed twice", f.Name)
		}
		seen[f.Name] = true
	}
}

func TestUnknownFlags(t *testing.T) {
	text := "Compare with --disable-lora; lower `--max-running-requests` (--port=30000), KV pressure -> eviction, | --- |, " +
		"--disable-lora again and --enable-lora/--lora-paths."
	if got := UnknownFlags(text); !slices.Equal(got, []string{"--disable-lora"}) {
		t.Errorf("UnknownFlags = %q, want only --disable-lora", got)
	}
}

// Every flag a rendered runbook page names is on the list.
func TestRunbookFlagsAreVerified(t *testing.T) {
	b, err := New(detect.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range b.Pages() {
		md, _ := b.Markdown(p.Name)
		if bad := UnknownFlags(md); len(bad) > 0 {
			t.Errorf("runbook %s names flags nobody verified: %q (verify them against the tool and add them to Flags with the source, or rephrase)", p.Name, bad)
		}
	}
}

// Every flag the detectors' and correlation's texts can name (their string
// literals, so the branches no golden page shows are covered too), and
// every flag in the golden pages, is on the list.
func TestPageFlagsAreVerified(t *testing.T) {
	for _, dir := range []string{"../../pkg/detect", "../correlate"} {
		for path, s := range stringLiterals(t, dir) {
			if bad := UnknownFlags(s); len(bad) > 0 {
				t.Errorf("%s names flags nobody verified: %q in %q", path, bad, s)
			}
		}
	}
	files, err := filepath.Glob("../../pkg/notify/golden/testdata/*/*")
	if err != nil {
		t.Fatal(err)
	}
	postmortems, err := filepath.Glob("../../cmd/watchdog/testdata/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, postmortems...)
	if len(files) < 10 {
		t.Fatalf("found only %d golden pages", len(files))
	}
	for _, path := range files {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		text := string(raw)
		if strings.HasSuffix(path, ".json") {
			text = strings.Join(jsonStrings(t, path, raw), "\n")
		}
		if bad := UnknownFlags(text); len(bad) > 0 {
			t.Errorf("%s names flags nobody verified: %q", path, bad)
		}
	}
}

// stringLiterals are the string constants of dir's non-test Go files, by
// file:line.
func stringLiterals(t *testing.T, dir string) map[string]string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	fset := token.NewFileSet()
	for _, path := range paths {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if s, err := strconv.Unquote(lit.Value); err == nil {
					out[fset.Position(lit.Pos()).String()] = s
				}
			}
			return true
		})
	}
	if len(out) == 0 {
		t.Fatalf("no string literals in %s", dir)
	}
	return out
}

// jsonStrings lists every string in a JSON document; the text a page shows
// is in them, unescaped.
func jsonStrings(t *testing.T, path string, raw []byte) []string {
	t.Helper()
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var out []string
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case string:
			out = append(out, v)
		case []any:
			for _, x := range v {
				walk(x)
			}
		case map[string]any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(v)
	return out
}
