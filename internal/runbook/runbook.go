// Package runbook serves the incident runbooks, written in the project's own
// words from the on-call seeds and embedded in the binary, as HTML at
// /runbooks/<class>.
package runbook

import (
	"bytes"
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"sort"
	"strings"

	"github.com/yuin/goldmark"
)

//go:embed pages/*.md
var pages embed.FS

// Book holds the rendered runbooks.
type Book struct {
	html  map[string]template.HTML
	title map[string]string
}

// New renders every embedded runbook.
func New() (*Book, error) {
	b := &Book{html: map[string]template.HTML{}, title: map[string]string{}}
	md := goldmark.New()
	entries, err := fs.ReadDir(pages, "pages")
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		src, err := pages.ReadFile("pages/" + e.Name())
		if err != nil {
			return nil, err
		}
		var buf bytes.Buffer
		if err := md.Convert(src, &buf); err != nil {
			return nil, fmt.Errorf("runbook %s: %w", e.Name(), err)
		}
		class := strings.TrimSuffix(e.Name(), ".md")
		b.html[class] = template.HTML(buf.String())
		title, _, _ := strings.Cut(string(src), "\n")
		b.title[class] = strings.TrimPrefix(title, "# ")
	}
	return b, nil
}

// Classes lists the classes with a runbook.
func (b *Book) Classes() []string {
	out := make([]string, 0, len(b.html))
	for c := range b.html {
		out = append(out, c)
	}
	sort.Strings(out)
	return out
}

// Markdown returns the source of a class's runbook.
func (b *Book) Markdown(class string) (string, bool) {
	src, err := pages.ReadFile("pages/" + class + ".md")
	return string(src), err == nil
}

var page = template.Must(template.New("page").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{.Title}} — sglang-watchdog runbook</title>
<style>body{font-family:system-ui,sans-serif;max-width:52rem;margin:2rem auto;padding:0 1rem;line-height:1.5}code{background:#f3f3f3;padding:0 .2em}</style>
</head><body><p><a href="/runbooks/">All runbooks</a></p>{{.Body}}</body></html>
`))

// ServeHTTP serves /runbooks/ (an index) and /runbooks/<class>.
func (b *Book) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	class := strings.Trim(strings.TrimPrefix(r.URL.Path, "/runbooks"), "/")
	var body template.HTML
	title := "Runbooks"
	if class == "" {
		var sb strings.Builder
		sb.WriteString("<h1>Runbooks</h1><ul>")
		for _, c := range b.Classes() {
			fmt.Fprintf(&sb, `<li><a href="/runbooks/%s">%s</a></li>`, template.HTMLEscapeString(c), template.HTMLEscapeString(b.title[c]))
		}
		sb.WriteString("</ul>")
		body = template.HTML(sb.String())
	} else {
		h, ok := b.html[class]
		if !ok {
			http.Error(w, "no runbook for class "+template.HTMLEscapeString(class), http.StatusNotFound)
			return
		}
		body, title = h, b.title[class]
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	page.Execute(w, struct {
		Title string
		Body  template.HTML
	}{title, body})
}
