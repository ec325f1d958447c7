package config

import (
	"errors"
	"fmt"
	"reflect"
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
			s := fmt.Sprintf("line %d: %s: no such field", line, path)
			if near := nearest(path); near != "" {
				s += " (did you mean " + near + "?)"
			}
			return s
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

// nearest is what an unknown key at path was likely meant to be: a key of
// the same mapping a typo or two away ("intervall": interval), else the
// path of a key of that name elsewhere ("slack" at the top:
// notify.slack); "" when nothing is close.
func nearest(path string) string {
	segs := strings.Split(path, ".")
	key := segs[len(segs)-1]
	best, bestDist := "", 3
	for _, k := range keysAt(reflect.TypeFor[Config](), segs[:len(segs)-1]) {
		if d := distance(key, k); d < bestDist && d < len(key)/2+1 {
			best, bestDist = k, d
		}
	}
	if best != "" {
		return best
	}
	// Elsewhere: the shallowest place, when it is the only one that deep
	// (notify.slack, not notify.receivers.slack).
	var found []string
	walkKeys(reflect.TypeFor[Config](), "", 0, func(p string) {
		if !strings.HasSuffix(p, "."+key) {
			return
		}
		switch d := strings.Count(p, "."); {
		case len(found) == 0 || d < strings.Count(found[0], "."):
			found = []string{p}
		case d == strings.Count(found[0], "."):
			found = append(found, p)
		}
	})
	if len(found) == 1 {
		return found[0]
	}
	return ""
}

// keysAt are the keys of the mapping at path segs below type t ("targets[0]"
// is an item of targets); nil where the path leaves the configuration's
// structs.
func keysAt(t reflect.Type, segs []string) []string {
	for _, seg := range segs {
		name, _, _ := strings.Cut(seg, "[")
		f, ok := fieldOf(deref(t), name)
		if !ok {
			return nil
		}
		t = f
		for range strings.Count(seg, "[") {
			if t = deref(t); t.Kind() != reflect.Slice && t.Kind() != reflect.Array {
				return nil
			}
			t = t.Elem()
		}
	}
	var keys []string
	eachField(deref(t), func(name string, _ reflect.Type) { keys = append(keys, name) })
	return keys
}

// walkKeys calls fn with the path of every key below t, to a few levels.
func walkKeys(t reflect.Type, path string, depth int, fn func(string)) {
	if depth > 5 {
		return
	}
	eachField(deref(t), func(name string, ft reflect.Type) {
		p := name
		if path != "" {
			p = path + "." + name
		}
		fn(p)
		if ft = deref(ft); ft.Kind() == reflect.Slice {
			ft = ft.Elem()
		}
		walkKeys(ft, p, depth+1, fn)
	})
}

// fieldOf is the type of the field of struct t whose key is name.
func fieldOf(t reflect.Type, name string) (reflect.Type, bool) {
	var out reflect.Type
	eachField(t, func(n string, ft reflect.Type) {
		if n == name && out == nil {
			out = ft
		}
	})
	return out, out != nil
}

// eachField calls fn with the key and type of every field struct t
// decodes, as yaml.v3 names them; embedded structs are inline (the
// configuration's wrappers of Prometheus' HTTP client decode it so).
func eachField(t reflect.Type, fn func(string, reflect.Type)) {
	if t.Kind() != reflect.Struct {
		return
	}
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		switch {
		case name == "-" || !f.IsExported():
		case f.Anonymous || strings.Contains(opts, "inline"):
			eachField(deref(f.Type), fn)
		case name == "":
			fn(strings.ToLower(f.Name), f.Type)
		default:
			fn(name, f.Type)
		}
	}
}

func deref(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// distance is the edit distance between a and b.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}
