// Package runbook serves the incident runbooks, written in the project's own
// words from the on-call seeds and embedded in the binary, as HTML at
// /runbooks/<class>, with an index at /runbooks/.
//
// A page is pages/<name>.md. Its first heading is the title and the
// paragraph after it the one-line summary the index shows. A page with a
// "How the watchdog decided" section is an incident class the watchdog pages
// for; the others (the on-call workflow, output quality) are guides.
package runbook

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"path"
	"sort"
	"strings"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	"github.com/yuin/goldmark/parser"
	"github.com/yuin/goldmark/text"
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
}

type entry struct {
	Page
	source []byte
	html   template.HTML
}

// Book holds the rendered runbooks. It is immutable after New and safe for
// concurrent use.
type Book struct {
	pages map[string]*entry
	names []string // sorted
}

// New renders every embedded runbook.
func New() (*Book, error) {
	sub, err := fs.Sub(embedded, "pages")
	if err != nil {
		return nil, err
	}
	return newBook(sub)
}

// newBook renders every *.md file at the root of fsys.
func newBook(fsys fs.FS) (*Book, error) {
	md := goldmark.New(
		goldmark.WithExtensions(extension.Table),
		// Heading ids let a page link straight to a section
		// (/runbooks/preempt_storm#emergency-steps). Raw HTML in a page is
		// not rendered: goldmark's default (no html.WithUnsafe) omits it and
		// drops javascript: links.
		goldmark.WithParserOptions(parser.WithAutoHeadingID()),
	)
	files, err := fs.Glob(fsys, "*.md")
	if err != nil {
		return nil, err
	}
	b := &Book{pages: map[string]*entry{}}
	for _, file := range files {
		name := strings.TrimSuffix(file, ".md")
		if !validName(name) {
			return nil, fmt.Errorf("runbook %s: name must be lower-case letters, digits and underscores", file)
		}
		src, err := fs.ReadFile(fsys, file)
		if err != nil {
			return nil, err
		}
		doc := md.Parser().Parse(text.NewReader(src))
		p, err := describe(name, doc, src)
		if err != nil {
			return nil, fmt.Errorf("runbook %s: %w", file, err)
		}
		var buf bytes.Buffer
		if err := md.Renderer().Render(&buf, src, doc); err != nil {
			return nil, fmt.Errorf("runbook %s: %w", file, err)
		}
		b.pages[name] = &entry{Page: p, source: src, html: template.HTML(buf.String())}
		b.names = append(b.names, name)
	}
	sort.Strings(b.names)
	return b, nil
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
	out := make([]Page, 0, len(b.names))
	for _, n := range b.names {
		out = append(out, b.pages[n].Page)
	}
	return out
}

// Classes lists the incident classes with a runbook, sorted.
func (b *Book) Classes() []string {
	var out []string
	for _, n := range b.names {
		if b.pages[n].Incident {
			out = append(out, n)
		}
	}
	return out
}

// Has reports whether an incident class has a runbook.
func (b *Book) Has(class string) bool {
	e, ok := b.pages[class]
	return ok && e.Incident
}

// Markdown returns the source of a page (a class or a guide).
func (b *Book) Markdown(name string) (string, bool) {
	e, ok := b.pages[name]
	if !ok {
		return "", false
	}
	return string(e.source), true
}

// Every link is relative so the pages work behind a proxy that mounts the
// daemon under a path prefix: from /runbooks/<name>, "./" is the index and
// "triage" a sibling page.
var layout = template.Must(template.New("layout").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}} — sglang-watchdog runbook</title>
<style>body{font-family:system-ui,sans-serif;max-width:52rem;margin:2rem auto;padding:0 1rem;line-height:1.5}code{background:#f3f3f3;padding:0 .2em}pre{background:#f3f3f3;padding:.5em;overflow-x:auto}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.2em .5em;text-align:left}</style>
</head><body>{{if not .Index}}<p><a href="./">All runbooks</a> · <a href="triage">On-call workflow</a></p>{{end}}
{{.Body}}</body></html>
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
	name := strings.TrimPrefix(rest, "/")
	if trimmed, ok := strings.CutSuffix(name, "/"); ok && b.pages[trimmed] != nil {
		http.Redirect(w, r, "../"+trimmed, http.StatusMovedPermanently)
		return
	}
	e, ok := b.pages[name]
	if !ok {
		msg := "no such runbook; see the index at /runbooks/"
		if validName(name) {
			// Only a harmless name is echoed, and as text/plain.
			msg = fmt.Sprintf("no runbook named %q; see the index at /runbooks/", name)
		}
		http.Error(w, msg, http.StatusNotFound)
		return
	}
	b.write(w, e.Title, e.html, false)
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
	b.write(w, "Runbooks", template.HTML(body.String()), true)
}

func (b *Book) write(w http.ResponseWriter, title string, body template.HTML, isIndex bool) {
	var out bytes.Buffer
	err := layout.Execute(&out, struct {
		Title string
		Body  template.HTML
		Index bool
	}{title, body, isIndex})
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
