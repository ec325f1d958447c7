package detect

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// The documentation that repeats the registry is generated from it
// (scripts/generate, run by `go generate ./...`): the README's table of
// incident classes, the detectors section of configs/watchdog.yaml and
// the settings tables of docs/configuration.md.
// Each detector describes itself in its own file (its doc method, and a
// `doc` tag on each setting worth a comment).

// doc is what a detector says about itself for the generated
// documentation.
type doc struct {
	// name is the incident's name on a page, a capitalised noun phrase
	// ("Preemption storm").
	name string
	// means is what a finding means, in a few words (the class table's
	// "what it means").
	means string
	// signals are the signals it reads and its rule, by their real names
	// (the class table's "main signals").
	signals string
	// settings is the comment over its section of configs/watchdog.yaml.
	settings string
}

// ClassTable is the README's table of incident classes: one row per
// detector of c, in c's order, with the severities it pages with.
func (c Catalog) ClassTable() string {
	var b strings.Builder
	b.WriteString("| class | severity | what it means | main signals (real SGLang names) |\n| --- | --- | --- | --- |\n")
	cell := strings.NewReplacer("|", `\|`, "\n", " ")
	for _, e := range c {
		var sev []string
		for _, s := range e.Severities() {
			sev = append(sev, s.String())
		}
		d := e.doc()
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", e.Class(), strings.Join(sev, ", "), cell.Replace(d.means), cell.Replace(d.signals))
	}
	return b.String()
}

// SettingsYAML is the "detectors" section of configs/watchdog.yaml: every
// detector of c with its defaults, in c's order, then the triage; each
// section under the comment its detector gives, each setting with its
// `doc` tag as a comment. Decoded, it is c.DefaultConfig().
func (c Catalog) SettingsYAML() string {
	defaults := c.DefaultConfig()
	var b strings.Builder
	b.WriteString("detectors:\n")
	for _, e := range c {
		writeSection(&b, string(e.Class()), e.doc().settings, reflect.ValueOf(e.defaults()))
	}
	writeSection(&b, triageKey, triageDoc, reflect.ValueOf(defaults.Triage))
	return b.String()
}

const (
	// yamlWidth is where comments are wrapped.
	yamlWidth = 78
	// longSetting: a setting line longer than this has its comment on
	// the line above instead of beside it.
	longSetting = 60
)

// writeSection writes one section of the detectors mapping, at an indent
// of two, under its comment.
func writeSection(b *strings.Builder, key, comment string, settings reflect.Value) {
	writeComment(b, "  ", comment)
	b.WriteString("  " + key + ":\n")
	var lines []yamlLine
	blocks := 0
	settingLines(&lines, &blocks, 0, "    ", settings)
	writeAligned(b, lines)
}

// yamlLine is a line of a settings mapping and its comment; a nested
// mapping's lines follow their key's line, one level further in.
type yamlLine struct {
	text, comment string
	// block numbers the mapping the line belongs to: comments align
	// within one.
	block int
}

// settingLines appends the lines of a settings struct (its fields with a
// yaml tag, nested structs as nested mappings) at the indent given, in
// block; blocks counts the blocks numbered so far.
func settingLines(lines *[]yamlLine, blocks *int, block int, indent string, v reflect.Value) {
	eachSetting(v, func(key, comment string, fv reflect.Value) {
		if fv.Kind() == reflect.Struct {
			// A nested mapping's key aligns its comment with its own
			// settings'.
			*blocks++
			*lines = append(*lines, yamlLine{text: indent + key + ":", comment: comment, block: *blocks})
			settingLines(lines, blocks, *blocks, indent+"  ", fv)
			return
		}
		*lines = append(*lines, yamlLine{text: indent + key + ": " + scalar(fv), comment: comment, block: block})
	})
}

// eachSetting calls fn with the YAML key, `doc` tag and value of each
// field of the settings struct v that has a yaml tag, in order.
func eachSetting(v reflect.Value, fn func(key, comment string, fv reflect.Value)) {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		key, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if key == "" || key == "-" || !f.IsExported() {
			continue
		}
		fn(key, f.Tag.Get("doc"), v.Field(i))
	}
}

// SettingsTables is the detectors part of docs/configuration.md: every
// detector of c in c's order, then the triage, each under the comment its
// section has in configs/watchdog.yaml, with a table of its settings, their
// defaults and `doc` tags. A nested mapping is one row listing its keys;
// `enabled` has a row only where it is off by default.
func (c Catalog) SettingsTables() string {
	var b strings.Builder
	for _, e := range c {
		writeTable(&b, string(e.Class()), e.doc().settings, reflect.ValueOf(e.defaults()))
	}
	writeTable(&b, triageKey, triageDoc, reflect.ValueOf(c.DefaultConfig().Triage))
	return strings.TrimSuffix(b.String(), "\n")
}

// writeTable writes one section's settings as a Markdown table.
func writeTable(b *strings.Builder, key, comment string, settings reflect.Value) {
	cell := strings.NewReplacer("|", `\|`, "\n", " ")
	fmt.Fprintf(b, "`%s`: %s\n\n| key | default | meaning |\n| --- | --- | --- |\n", key, comment)
	eachSetting(settings, func(k, doc string, fv reflect.Value) {
		if k == "enabled" && fv.Bool() {
			return // the page says once that every detector is on by default
		}
		def := "`" + scalar(fv) + "`"
		if fv.Kind() == reflect.Struct {
			// Its keys' comments continue its own, as in the YAML.
			var defs, docs []string
			eachSetting(fv, func(k, d string, v reflect.Value) {
				defs = append(defs, "`"+k+": "+scalar(v)+"`")
				docs = append(docs, d)
			})
			def, doc = strings.Join(defs, ", "), strings.Join(append([]string{doc}, docs...), " ")
		}
		fmt.Fprintf(b, "| `%s` | %s | %s |\n", k, cell.Replace(def), cell.Replace(doc))
	})
	b.WriteString("\n")
}

// scalar writes a setting's value as it is configured: durations the
// short way ("2m", not "2m0s"), numbers without exponents.
func scalar(v reflect.Value) string {
	switch v.Kind() {
	case reflect.Bool:
		return strconv.FormatBool(v.Bool())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if v.Type() == reflect.TypeFor[time.Duration]() {
			return ShortDuration(time.Duration(v.Int()))
		}
		return strconv.FormatInt(v.Int(), 10)
	case reflect.Float32, reflect.Float64:
		return strconv.FormatFloat(v.Float(), 'f', -1, 64)
	}
	out, err := yaml.Marshal(v.Interface())
	if err != nil {
		return fmt.Sprintf("%q", fmt.Sprint(v.Interface()))
	}
	return strings.TrimSuffix(string(out), "\n")
}

// writeAligned writes lines with the comments of one block in one column,
// two spaces after the longest commented line; a long line has its
// comment above it.
func writeAligned(b *strings.Builder, lines []yamlLine) {
	column := map[int]int{}
	for _, l := range lines {
		if l.comment != "" && len(l.text) <= longSetting {
			column[l.block] = max(column[l.block], len(l.text)+2)
		}
	}
	for _, l := range lines {
		switch {
		case l.comment == "":
			b.WriteString(l.text)
		case len(l.text) > longSetting:
			indent := l.text[:len(l.text)-len(strings.TrimLeft(l.text, " "))]
			writeComment(b, indent, l.comment)
			b.WriteString(l.text)
		default:
			b.WriteString(l.text + strings.Repeat(" ", column[l.block]-len(l.text)) + "# " + l.comment)
		}
		b.WriteByte('\n')
	}
}

// writeComment writes text as comment lines at indent, wrapped at
// yamlWidth.
func writeComment(b *strings.Builder, indent, text string) {
	line := ""
	for _, w := range strings.Fields(text) {
		if line != "" && len(indent)+2+len(line)+1+len(w) > yamlWidth {
			b.WriteString(indent + "# " + line + "\n")
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	if line != "" {
		b.WriteString(indent + "# " + line + "\n")
	}
}
