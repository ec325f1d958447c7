package config

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// explained gives the problems of the decoder's *yaml.TypeError in the
// file's own terms: the key's path ("slos.objectives[0].period") where
// the decoder names a Go type ("config.plain"), and what a value of the
// wrong kind should have been. The decoder says these things only in
// words, so they are read back from its (stable) wording to be shown; a
// problem that cannot be placed in the file keeps the decoder's words.
func explained(err error, data []byte) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return err
	}
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) != nil {
		return err
	}
	out := &yaml.TypeError{Errors: make([]string, len(te.Errors))}
	for i, p := range te.Errors {
		out.Errors[i] = explain(p, &doc)
	}
	return out
}

var (
	unknownField = regexp.MustCompile(`^line (\d+): field (\S+) not found in type \S+$`)
	wrongKind    = regexp.MustCompile("^line (\\d+): cannot unmarshal !!(\\w+) (?:`(.*)` )?into (\\S+)$")
	days         = regexp.MustCompile(`^(\d+)d$`)
)

// explain is one problem of the decoder's in the file's terms.
func explain(problem string, doc *yaml.Node) string {
	if m := unknownField.FindStringSubmatch(problem); m != nil {
		line, _ := strconv.Atoi(m[1])
		if path, ok := find(doc, "", func(k, _ *yaml.Node) bool { return k != nil && k.Line == line && k.Value == m[2] }); ok {
			return fmt.Sprintf("line %d: %s: no such field", line, path)
		}
		return problem
	}
	m := wrongKind.FindStringSubmatch(problem)
	if m == nil {
		return problem
	}
	line, _ := strconv.Atoi(m[1])
	tag, value, into := "!!"+m[2], m[3], m[4]
	path, ok := find(doc, "", func(_, v *yaml.Node) bool {
		return v.Line == line && v.ShortTag() == tag && (value == "" || v.Value == value)
	})
	if !ok {
		return problem
	}
	got := strconv.Quote(value)
	switch tag {
	case "!!seq":
		got = "a list"
	case "!!map":
		got = "a mapping"
	}
	if want, ok := scalar(into, value); ok {
		return fmt.Sprintf("line %d: %s: %s is not %s", line, path, got, want)
	}
	want := "a mapping of its fields"
	switch {
	case strings.HasPrefix(into, "[]"):
		want = "a list"
	case strings.HasPrefix(into, "map["):
		want = "a mapping"
	}
	return fmt.Sprintf("line %d: %s: %s where %s is expected", line, path, got, want)
}

// scalar says what a Go scalar type takes in a configuration file; false
// for another type.
func scalar(goType, value string) (string, bool) {
	switch goType {
	case "time.Duration":
		s := "a duration (a number and a unit: ms, s, m or h)"
		if d := days.FindStringSubmatch(value); d != nil {
			n, _ := strconv.Atoi(d[1])
			s += fmt.Sprintf("; days are written in hours: %dh", 24*n)
		}
		return s, true
	case "int", "int64", "int32", "uint", "uint64", "uint32":
		return "a whole number", true
	case "float64", "float32":
		return "a number", true
	case "bool":
		return "true or false", true
	case "string":
		return "a string", true
	}
	return "", false
}

// find is the path of the first node below n (depth first, in the file's
// order) for which match holds, given the key node of a mapping value
// (nil for the document and list items) and the node itself.
func find(n *yaml.Node, path string, match func(k, v *yaml.Node) bool) (string, bool) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			if p, ok := visit(nil, c, path, match); ok {
				return p, true
			}
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := k.Value
			if path != "" {
				p = path + "." + k.Value
			}
			if got, ok := visit(k, v, p, match); ok {
				return got, true
			}
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			if got, ok := visit(nil, c, fmt.Sprintf("%s[%d]", path, i), match); ok {
				return got, true
			}
		}
	}
	return "", false
}

// visit matches v, then what is below it. The document's root has no
// path to name: a problem with the whole file keeps the decoder's words.
func visit(k, v *yaml.Node, path string, match func(k, v *yaml.Node) bool) (string, bool) {
	if path != "" && match(k, v) {
		return path, true
	}
	return find(v, path, match)
}
