// Command chart-readme writes the values table of a Helm chart's README.md
// from the `# --` comments of its values.yaml (the helm-docs convention):
//
//	go run ./scripts/chart-readme deploy/helm/sglang-watchdog
//
// The table replaces what lies between the markers <!-- values:start -->
// and <!-- values:end --> in README.md. `go generate ./...` runs it (the
// directive below), and CI fails when that changes the checked-in README.
package main

//go:generate go run . ../../deploy/helm/sglang-watchdog

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"
)

const (
	startMarker = "<!-- values:start -->"
	endMarker   = "<!-- values:end -->"
	docPrefix   = "# -- "
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: chart-readme CHART_DIR")
		os.Exit(2)
	}
	if err := write(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "chart-readme:", err)
		os.Exit(1)
	}
}

func write(chart string) error {
	values, err := os.ReadFile(filepath.Join(chart, "values.yaml"))
	if err != nil {
		return err
	}
	readmePath := filepath.Join(chart, "README.md")
	readme, err := os.ReadFile(readmePath)
	if err != nil {
		return err
	}
	out, err := render(values, readme)
	if err != nil {
		return err
	}
	return os.WriteFile(readmePath, out, 0o644)
}

// render returns readme with the table of values' documented keys between
// the markers.
func render(values, readme []byte) ([]byte, error) {
	before, rest, ok := bytes.Cut(readme, []byte(startMarker))
	_, after, ok2 := bytes.Cut(rest, []byte(endMarker))
	if !ok || !ok2 {
		return nil, fmt.Errorf("README.md lacks %s ... %s", startMarker, endMarker)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(values, &doc); err != nil {
		return nil, fmt.Errorf("values.yaml: %w", err)
	}
	if len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, errors.New("values.yaml: not a mapping")
	}
	var rows []string
	if err := walk(doc.Content[0], "", &rows); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.Write(before)
	b.WriteString(startMarker + "\n")
	b.WriteString("| Key | Type | Default | Description |\n| --- | --- | --- | --- |\n")
	for _, r := range rows {
		b.WriteString(r + "\n")
	}
	b.WriteString(endMarker)
	b.Write(after)
	return b.Bytes(), nil
}

// walk adds a row for every key with a `# --` comment, depth first in
// file order.
func walk(m *yaml.Node, prefix string, rows *[]string) error {
	for i := 0; i+1 < len(m.Content); i += 2 {
		key, val := m.Content[i], m.Content[i+1]
		path := prefix + key.Value
		if desc := description(key.HeadComment); desc != "" {
			var v any
			if err := val.Decode(&v); err != nil {
				return fmt.Errorf("values.yaml: %s: %w", path, err)
			}
			def, err := json.Marshal(v)
			if err != nil {
				return fmt.Errorf("values.yaml: %s: %w", path, err)
			}
			*rows = append(*rows, fmt.Sprintf("| `%s` | %s | `%s` | %s |", path, kind(val), cell(string(def)), cell(desc)))
		}
		if val.Kind == yaml.MappingNode {
			if err := walk(val, path+".", rows); err != nil {
				return err
			}
		}
	}
	return nil
}

// description is the `# --` paragraph of a head comment: its first line
// starts with "# -- ", the following comment lines continue it.
func description(comment string) string {
	lines := strings.Split(comment, "\n")
	start := -1
	for i, l := range lines {
		if strings.HasPrefix(l, docPrefix) {
			start = i
		}
	}
	if start < 0 {
		return ""
	}
	var words []string
	for i, l := range lines[start:] {
		if i == 0 {
			l = strings.TrimPrefix(l, docPrefix)
		} else {
			l = strings.TrimPrefix(strings.TrimPrefix(l, "#"), " ")
		}
		words = append(words, strings.TrimSpace(l))
	}
	return strings.Join(words, " ")
}

func kind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "object"
	case yaml.SequenceNode:
		return "list"
	}
	switch n.Tag {
	case "!!int":
		return "int"
	case "!!bool":
		return "bool"
	case "!!float":
		return "float"
	}
	return "string"
}

// cell escapes what would end a Markdown table cell.
func cell(s string) string {
	return strings.ReplaceAll(s, "|", `\|`)
}
