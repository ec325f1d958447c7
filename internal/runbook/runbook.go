// Package runbook serves the incident runbooks, written in the project's own
// words from the on-call seeds and embedded in the binary, as HTML at
// /runbooks/<class>, with an index at /runbooks/.
//
// A page is pages/<name>.md. Its first heading is the title and the
// paragraph after it the one-line summary the index shows. A page with a
// "How the watchdog decided" section is an incident class the watchdog pages
// for; the others (the on-call workflow, output quality) are guides.
//
// A class page opens with front matter naming the severities it describes:
//
//	---
//	severities: [warning, critical]
//	---
//
// and never types a detector's threshold by hand: the page is a text/template
// that reads the running configuration by YAML path,
// {{setting "detectors.preempt_storm.min_retractions_per_second"}} (the
// value), {{percent "..."}} (a 0-1 fraction as a percentage) and
// {{key "..."}} (the path itself, to tell the reader which setting to
// change); {{range needs}} lists each detector with the families it reads,
// and {{range unlinked}} the class pages the page does not link to (the
// on-call workflow lists a class nobody wrote in yet). A path that names no
// setting is an error when the book is built,
// and a reload re-renders the pages with the new values (Configure), so a
// page cannot state a number the detectors do not use.
package runbook

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"maps"
	"math"
	"net/http"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	texttemplate "text/template"
	"time"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	"github.com/yuin/goldmark/parser"
	"github.com/yuin/goldmark/text"
	"go.yaml.in/yaml/v3"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
)

//go:embed pages/*.md
var embedded embed.FS

// decisionSection marks a page as an incident class: only classes have a
// verdict to explain.
const decisionSection = "How the watchdog decided"

// Page describes one runbook page.
type Page struct {
	// Name is the page's file name without .md, the last element of its URL:
	// the incident class for a class page.
	Name string
	// Title is the text of the page's first heading.
	Title string
	// Summary is the first paragraph after the title, as plain text.
	Summary string
	// Incident is true for an incident class the watchdog pages for.
	Incident bool
	// Severities are the severities a class page describes (its front
	// matter), lowest first; none for a guide.
	Severities []detect.Severity
	// Disabled is true for the page of a detector the configuration
	// switches off.
	Disabled bool
}

type entry struct {
	Page
	markdown []byte // rendered with the configuration, front matter removed
	html     template.HTML
}

// source is a page as embedded: its front matter and its template.
type source struct {
	name       string
	severities []detect.Severity
	tmpl       *texttemplate.Template
}

// edition is the book rendered with one configuration.
type edition struct {
	pages map[string]*entry
	names []string // sorted
}

// Book holds the runbooks rendered with the detectors' configuration. It is
// safe for concurrent use; Configure replaces the rendered pages at once.
type Book struct {
	sources []source
	current atomic.Pointer[edition]
}

// New renders every embedded runbook with cfg, and the pages of each of
// dirs (more <name>.md files, e.g. the page of a detector built outside
// the daemon's set). A page name given twice is an error.
func New(cfg detect.Config, dirs ...fs.FS) (*Book, error) {
	sub, err := fs.Sub(embedded, "pages")
	if err != nil {
		return nil, err
	}
	return newBook(cfg, append([]fs.FS{sub}, dirs...)...)
}

// newBook reads every *.md file at the root of each of dirs and renders it
// with cfg.
func newBook(cfg detect.Config, dirs ...fs.FS) (*Book, error) {
	b := &Book{}
	seen := map[string]bool{}
	for _, fsys := range dirs {
		files, err := fs.Glob(fsys, "*.md")
		if err != nil {
			return nil, err
		}
		for _, file := range files {
			name := strings.TrimSuffix(file, ".md")
			if !validName(name) {
				return nil, fmt.Errorf("runbook %s: name must be lower-case letters, digits and underscores", file)
			}
			if seen[name] {
				return nil, fmt.Errorf("runbook %s: given twice", file)
			}
			seen[name] = true
			src, err := fs.ReadFile(fsys, file)
			if err != nil {
				return nil, err
			}
			s, err := parseSource(name, src)
			if err != nil {
				return nil, fmt.Errorf("runbook %s: %w", file, err)
			}
			b.sources = append(b.sources, s)
		}
	}
	if err := b.Configure(cfg); err != nil {
		return nil, err
	}
	return b, nil
}

// frontMatter is the YAML block between "---" lines that may open a page.
type frontMatter struct {
	Severities []string `yaml:"severities"`
}

func parseSource(name string, src []byte) (source, error) {
	s := source{name: name}
	body := src
	if rest, ok := bytes.CutPrefix(src, []byte("---\n")); ok {
		block, after, found := bytes.Cut(rest, []byte("\n---\n"))
		if !found {
			return s, errors.New("front matter has no closing --- line")
		}
		var fm frontMatter
		dec := yaml.NewDecoder(bytes.NewReader(block))
		dec.KnownFields(true)
		if err := dec.Decode(&fm); err != nil {
			return s, fmt.Errorf("front matter: %w", err)
		}
		for _, v := range fm.Severities {
			sev, ok := detect.ParseSeverity(v)
			if !ok {
				return s, fmt.Errorf("front matter: severity %q is not info, warning or critical", v)
			}
			if slices.Contains(s.severities, sev) {
				return s, fmt.Errorf("front matter: severity %q given twice", v)
			}
			s.severities = append(s.severities, sev)
		}
		slices.Sort(s.severities)
		body = after
	}
	t, err := texttemplate.New(name).Funcs(settingFuncs(nil, nil)).Option("missingkey=error").Parse(string(body))
	if err != nil {
		return s, err
	}
	s.tmpl = t
	return s, nil
}

// Configure renders every page with cfg and, only when all of them render,
// serves the result: a page that names a setting cfg lacks is an error and
// the book keeps what it served.
func (b *Book) Configure(cfg detect.Config) error {
	r, err := b.Prepare(cfg)
	if err != nil {
		return err
	}
	b.Publish(r)
	return nil
}

// Rendering is the book rendered with one configuration, not yet served.
type Rendering struct{ ed *edition }

// Publish serves r: every page changes at once. A zero Rendering is
// ignored.
func (b *Book) Publish(r Rendering) {
	if r.ed != nil {
		b.current.Store(r.ed)
	}
}

// Prepare renders every page with cfg without serving it, so a caller can
// check a configuration before anything changes and publish it with the
// rest (a reload).
func (b *Book) Prepare(cfg detect.Config) (Rendering, error) {
	values, err := settingValues(cfg)
	if err != nil {
		return Rendering{}, err
	}
	disabled := map[string]bool{}
	for _, e := range cfg.Catalog() {
		disabled[string(e.Class())] = !e.Enabled(cfg)
	}
	md := goldmark.New(
		goldmark.WithExtensions(extension.Table),
		// Heading ids let a page link straight to a section
		// (/runbooks/preempt_storm#emergency-steps). Raw HTML in a page is
		// not rendered: goldmark's default (no html.WithUnsafe) omits it and
		// drops javascript: links.
		goldmark.WithParserOptions(parser.WithAutoHeadingID()),
	)
	funcs := settingFuncs(values, cfg.Catalog())
	ed := &edition{pages: map[string]*entry{}}
	var listsUnlinked []source
	for _, s := range b.sources {
		asked := false
		e, err := render(md, s, withUnlinked(funcs, func() []Page { asked = true; return nil }))
		if err != nil {
			return Rendering{}, err
		}
		if asked {
			listsUnlinked = append(listsUnlinked, s)
		}
		e.Disabled = disabled[s.name]
		ed.pages[s.name] = e
		ed.names = append(ed.names, s.name)
	}
	sort.Strings(ed.names)
	// A page that lists the class pages it does not link to (the on-call
	// workflow) is rendered again, now that every class page is known: a
	// new detector's page is reachable from it before anyone writes it in.
	for _, s := range listsUnlinked {
		var unlinked []Page
		for _, n := range ed.names {
			if p := ed.pages[n].Page; p.Incident && !bytes.Contains(ed.pages[s.name].markdown, []byte("]("+n+")")) {
				unlinked = append(unlinked, p)
			}
		}
		e, err := render(md, s, withUnlinked(funcs, func() []Page { return unlinked }))
		if err != nil {
			return Rendering{}, err
		}
		e.Disabled = ed.pages[s.name].Disabled
		ed.pages[s.name] = e
	}
	return Rendering{ed}, nil
}

// render executes a page's template with funcs and renders the result.
func render(md goldmark.Markdown, s source, funcs texttemplate.FuncMap) (*entry, error) {
	var src bytes.Buffer
	t, err := s.tmpl.Clone()
	if err == nil {
		err = t.Funcs(funcs).Execute(&src, nil)
	}
	if err != nil {
		return nil, fmt.Errorf("runbook %s.md: %w", s.name, err)
	}
	doc := md.Parser().Parse(text.NewReader(src.Bytes()))
	p, err := describe(s.name, doc, src.Bytes())
	if err != nil {
		return nil, fmt.Errorf("runbook %s.md: %w", s.name, err)
	}
	switch {
	case p.Incident && len(s.severities) == 0:
		return nil, fmt.Errorf("runbook %s.md: a class page names the severities it describes in its front matter", s.name)
	case !p.Incident && len(s.severities) > 0:
		return nil, fmt.Errorf("runbook %s.md: a guide has no severities", s.name)
	}
	p.Severities = s.severities
	var out bytes.Buffer
	if err := md.Renderer().Render(&out, src.Bytes(), doc); err != nil {
		return nil, fmt.Errorf("runbook %s.md: %w", s.name, err)
	}
	return &entry{Page: p, markdown: src.Bytes(), html: template.HTML(out.String())}, nil
}

// settingValues are cfg's settings by YAML path ("detectors.<class>.<key>",
// nested settings included), formatted for a reader.
func settingValues(cfg detect.Config) (map[string]string, error) {
	var root yaml.Node
	if err := root.Encode(cfg); err != nil {
		return nil, fmt.Errorf("runbooks: encoding the detector settings: %w", err)
	}
	out := map[string]string{}
	var walk func(path string, n *yaml.Node)
	walk = func(path string, n *yaml.Node) {
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				walk(path, c)
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				walk(path+"."+n.Content[i].Value, n.Content[i+1])
			}
		case yaml.ScalarNode:
			out[path] = formatScalar(n)
		}
	}
	walk("detectors", &root)
	return out, nil
}

// formatScalar writes numbers without exponents or float noise and
// durations the short way they are configured ("15m", not "15m0s").
func formatScalar(n *yaml.Node) string {
	switch n.Tag {
	case "!!float", "!!int":
		if v, err := strconv.ParseFloat(n.Value, 64); err == nil {
			return formatNumber(v)
		}
	case "!!str":
		if d, err := time.ParseDuration(n.Value); err == nil {
			return detect.ShortDuration(d)
		}
	}
	return n.Value
}

func formatNumber(v float64) string {
	return strconv.FormatFloat(math.Round(v*1e6)/1e6, 'f', -1, 64)
}

// classSignals is a row of {{range needs}}: a detector and the families
// it reads, as code spans.
type classSignals struct{ Class, Families string }

// settingFuncs are the template functions that read the configuration
// and its detectors; with nil values (parsing only) they are placeholders.
func settingFuncs(values map[string]string, detectors detect.Catalog) texttemplate.FuncMap {
	lookup := func(path string) (string, error) {
		v, ok := values[path]
		if !ok {
			return "", fmt.Errorf("no setting %q in the detectors' configuration", path)
		}
		return v, nil
	}
	return texttemplate.FuncMap{
		"setting": lookup,
		"percent": func(path string) (string, error) {
			v, err := lookup(path)
			if err != nil {
				return "", err
			}
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return "", fmt.Errorf("setting %q is %q, not a fraction", path, v)
			}
			return formatNumber(f*100) + "%", nil
		},
		"needs": func() []classSignals {
			var out []classSignals
			for _, e := range detectors {
				var families []string
				for _, f := range e.Signals() {
					// A histogram's _count sample stands for its family.
					f = strings.TrimSuffix(f, "_count")
					if !slices.Contains(families, f) {
						families = append(families, f)
					}
				}
				if len(families) > 0 {
					out = append(out, classSignals{Class: string(e.Class()), Families: "`" + strings.Join(families, "`, `") + "`"})
				}
			}
			return out
		},
		"key": func(path string) (string, error) {
			if _, err := lookup(path); err != nil {
				return "", err
			}
			return "`" + path + "`", nil
		},
		// unlinked lists the class pages the page does not link to; it is
		// known once every page is rendered (Prepare).
		unlinkedFunc: func() []Page { return nil },
	}
}

// unlinkedFunc is the template function a page uses to list the classes
// it does not link to.
const unlinkedFunc = "unlinked"

// withUnlinked is funcs with unlinked as given.
func withUnlinked(funcs texttemplate.FuncMap, unlinked func() []Page) texttemplate.FuncMap {
	out := maps.Clone(funcs)
	out[unlinkedFunc] = unlinked
	return out
}

// validName keeps page names URL- and HTML-safe without escaping.
func validName(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '_' {
			return false
		}
	}
	return true
}

// describe reads the title, summary and kind of a page from its syntax tree.
func describe(name string, doc ast.Node, src []byte) (Page, error) {
	p := Page{Name: name}
	for n := doc.FirstChild(); n != nil; n = n.NextSibling() {
		switch n := n.(type) {
		case *ast.Heading:
			switch {
			case n.Level == 1 && p.Title == "":
				p.Title = plainText(n, src)
			case n.Level == 2 && plainText(n, src) == decisionSection:
				p.Incident = true
			}
		case *ast.Paragraph:
			if p.Title != "" && p.Summary == "" {
				p.Summary = plainText(n, src)
			}
		}
	}
	if p.Title == "" {
		return p, errors.New("no title: the page must start with a level-1 heading")
	}
	if p.Summary == "" {
		return p, errors.New("no summary paragraph after the title")
	}
	return p, nil
}

// plainText is the text of a node without markup.
func plainText(n ast.Node, src []byte) string {
	var sb strings.Builder
	_ = ast.Walk(n, func(c ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch c := c.(type) {
		case *ast.Text:
			sb.Write(c.Value(src))
			if c.SoftLineBreak() || c.HardLineBreak() {
				sb.WriteByte(' ')
			}
		case *ast.String:
			sb.Write(c.Value)
		}
		return ast.WalkContinue, nil
	})
	return strings.TrimSpace(sb.String())
}

// Pages lists every page, sorted by name.
func (b *Book) Pages() []Page {
	ed := b.current.Load()
	out := make([]Page, 0, len(ed.names))
	for _, n := range ed.names {
		out = append(out, ed.pages[n].Page)
	}
	return out
}

// Classes lists the incident classes with a runbook, sorted.
func (b *Book) Classes() []string {
	ed := b.current.Load()
	var out []string
	for _, n := range ed.names {
		if ed.pages[n].Incident {
			out = append(out, n)
		}
	}
	return out
}

// Has reports whether an incident class has a runbook.
func (b *Book) Has(class string) bool {
	e, ok := b.current.Load().pages[class]
	return ok && e.Incident
}

// Markdown returns a page (a class or a guide) as markdown, rendered with
// the configuration and without its front matter.
func (b *Book) Markdown(name string) (string, bool) {
	e, ok := b.current.Load().pages[name]
	if !ok {
		return "", false
	}
	return string(e.markdown), true
}

// Every link is relative so the pages work behind a proxy that mounts the
// daemon under a path prefix: from /runbooks/<name>, "./" is the index and
// "triage" a sibling page.
var layout = template.Must(template.New("layout").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}} — sglang-watchdog runbook</title>
<style>body{font-family:system-ui,sans-serif;max-width:52rem;margin:2rem auto;padding:0 1rem;line-height:1.5}code{background:#f3f3f3;padding:0 .2em}pre{background:#f3f3f3;padding:.5em;overflow-x:auto}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.2em .5em;text-align:left}</style>
</head><body>{{if not .Index}}<p><a href="./">All runbooks</a> · <a href="triage">On-call workflow</a></p>{{end}}
{{if .Disabled}}<p><strong>This detector is switched off in this watchdog's configuration: it does not page for this class.</strong></p>
{{end}}{{.Body}}</body></html>
`))

var index = template.Must(template.New("index").Parse(`<h1>Runbooks</h1>
<p>One page per incident class the watchdog pages for: what it looks like, how the watchdog decided,
emergency steps, root-cause fixes, what to look at next and a postmortem template.
New to on-call? Start with <a href="triage">the on-call workflow</a>.</p>
<h2>Incident classes</h2>
<ul>{{range .Classes}}
<li><a href="{{.Name}}">{{.Title}}</a> (<code>{{.Name}}</code>) — {{.Summary}}</li>{{end}}
</ul>
<h2>Guides</h2>
<ul>{{range .Guides}}
<li><a href="{{.Name}}">{{.Title}}</a> — {{.Summary}}</li>{{end}}
</ul>
`))

// ServeHTTP serves /runbooks/ (the index) and /runbooks/<name>.
func (b *Book) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	rest, _ := strings.CutPrefix(r.URL.Path, "/runbooks")
	switch {
	case rest == "":
		// Relative links need the index at the directory URL.
		http.Redirect(w, r, path.Base(r.URL.Path)+"/", http.StatusMovedPermanently)
		return
	case rest == "/":
		b.serveIndex(w)
		return
	}
	ed := b.current.Load()
	name := strings.TrimPrefix(rest, "/")
	if trimmed, ok := strings.CutSuffix(name, "/"); ok && ed.pages[trimmed] != nil {
		http.Redirect(w, r, "../"+trimmed, http.StatusMovedPermanently)
		return
	}
	e, ok := ed.pages[name]
	if !ok {
		msg := "no such runbook; see the index at /runbooks/"
		if validName(name) {
			// Only a harmless name is echoed, and as text/plain.
			msg = fmt.Sprintf("no runbook named %q; see the index at /runbooks/", name)
		}
		http.Error(w, msg, http.StatusNotFound)
		return
	}
	b.write(w, e.Title, e.html, e.Disabled, false)
}

func (b *Book) serveIndex(w http.ResponseWriter) {
	var data struct{ Classes, Guides []Page }
	for _, p := range b.Pages() {
		if p.Incident {
			data.Classes = append(data.Classes, p)
		} else {
			data.Guides = append(data.Guides, p)
		}
	}
	var body bytes.Buffer
	if err := index.Execute(&body, data); err != nil {
		http.Error(w, "rendering the index failed", http.StatusInternalServerError)
		return
	}
	b.write(w, "Runbooks", template.HTML(body.String()), false, true)
}

func (b *Book) write(w http.ResponseWriter, title string, body template.HTML, disabled, isIndex bool) {
	var out bytes.Buffer
	err := layout.Execute(&out, struct {
		Title    string
		Body     template.HTML
		Disabled bool
		Index    bool
	}{title, body, disabled, isIndex})
	if err != nil {
		http.Error(w, "rendering the page failed", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	// The pages are static text: no scripts, no external resources.
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'")
	_, _ = w.Write(out.Bytes())
}
