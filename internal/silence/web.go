package silence

import (
	"html/template"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/alertmanager/pkg/labels"
	"go.uber.org/zap"
)

// formLabels are the labels the new-silence form offers, prefilled from
// the query (/silences/new?incident=...&replica=...).
var formLabels = []string{"incident", "replica", "model", "class", "severity"}

// formDurations are offered by the form.
var formDurations = []string{"30m", "1h", "2h", "4h", "8h", "24h", "72h"}

// pageHead is the workspace's head and navigation, with its stylesheet
// (served under /ui/; its .form-page rules are these pages'), so the
// silence pages read as part of the workspace.
const pageHead = `<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}} · sglang-watchdog</title>
<link rel="stylesheet" href="{{.Prefix}}/ui/style.css">
<link rel="icon" href="{{.Prefix}}/ui/icon.svg" type="image/svg+xml">
</head><body>
<a class="skip" href="#main">Skip to content</a>
<header><nav aria-label="Workspace"><a href="{{.Prefix}}/" class="brand">sglang-watchdog</a>
<a href="{{.Prefix}}/slos">SLOs</a> <a href="{{.Prefix}}/silences">Silences</a> <a href="{{.Prefix}}/silences/new">New silence</a>
<a href="{{.Prefix}}/api/v1/watchdog/alerts">Alerts API</a> <a href="{{.Prefix}}/runbooks/">Runbooks</a> <a href="{{.Prefix}}/metrics">Metrics</a></nav></header>
<main id="main" class="form-page">
`

var newTemplate = template.Must(template.New("new").Parse(pageHead + `<h1>New silence</h1>
<p>While a silence is active, alerts whose labels match every matcher are tracked and shown as
silenced, and nothing is sent for them. If one still fires when the silence ends, it pages then.</p>
{{with .Error}}<div class="error" role="alert"><p><strong>The silence was not created:</strong></p><p>{{.}}</p></div>{{end}}
<form method="post" action="{{.Prefix}}/silences/new">
<fieldset><legend>Matchers (label equals value; empty ones are ignored)</legend>
{{range .Labels}}<label for="m-{{.Name}}">{{.Name}}</label>
<input id="m-{{.Name}}" name="{{.Name}}" value="{{.Value}}" autocomplete="off">
{{end}}<label for="matchers">More matchers, one per line (Alertmanager syntax, e.g. <code>namespace=~"prod-.*"</code>)</label>
<textarea id="matchers" name="matchers" rows="3">{{.Extra}}</textarea>
</fieldset>
<label for="duration">Duration</label>
<select id="duration" name="duration">{{range .Durations}}<option value="{{.}}"{{if eq . $.Duration}} selected{{end}}>{{.}}</option>{{end}}</select>
<label for="created_by">Author</label>
<input id="created_by" name="created_by" value="{{.Author}}" required autocomplete="username">
<label for="comment">Comment (why; a ticket link)</label>
<textarea id="comment" name="comment" rows="3">{{.Comment}}</textarea>
<label for="token">API token</label>
<input id="token" name="token" type="password" required autocomplete="current-password">
<button type="submit">Create silence</button>
</form>
</main></body></html>
`))

var listTemplate = template.Must(template.New("list").Parse(pageHead + `<h1>Silences</h1>
{{with .Error}}<div class="error" role="alert"><p>{{.}}</p></div>{{end}}
{{if not .Silences}}<p>No silences.</p>{{else}}
<table><thead><tr><th scope="col">State</th><th scope="col">Matchers</th><th scope="col">Starts</th><th scope="col">Ends</th><th scope="col">Author</th><th scope="col">Comment</th><th scope="col">Expire</th></tr></thead><tbody>
{{range .Silences}}<tr id="silence-{{.ID}}"><td>{{.State}}</td><td>{{range .Matchers}}<code>{{.}}</code><br>{{end}}</td>
<td><time datetime="{{.StartsAt.Format "2006-01-02T15:04:05Z07:00"}}">{{.StartsAt.Format "2006-01-02 15:04 MST"}}</time></td>
<td><time datetime="{{.EndsAt.Format "2006-01-02T15:04:05Z07:00"}}">{{.EndsAt.Format "2006-01-02 15:04 MST"}}</time></td>
<td>{{.CreatedBy}}</td><td>{{.Comment}}</td>
<td>{{if ne .State "expired"}}<form method="post" action="{{$.Prefix}}/silences/{{.ID}}/expire">
<label for="token-{{.ID}}">API token</label><input id="token-{{.ID}}" name="token" type="password" required autocomplete="current-password">
<button type="submit">Expire</button></form>{{end}}</td></tr>
{{end}}</tbody></table>{{end}}
</main></body></html>
`))

type labelField struct{ Name, Value string }

type newPageData struct {
	Prefix                                         string
	Title, Error, Extra, Duration, Author, Comment string
	Labels                                         []labelField
	Durations                                      []string
}

func (h *Handler) render(w http.ResponseWriter, code int, t *template.Template, data any) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	// The pages need no script; their one stylesheet is inline. Forms may
	// post only back to the daemon.
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	w.WriteHeader(code)
	if err := t.Execute(w, data); err != nil {
		h.opts.Logger.Error("rendering a silences page failed", zap.Error(err))
	}
}

func (h *Handler) formData(get func(string) string) newPageData {
	d := newPageData{Prefix: h.opts.PathPrefix, Title: "New silence", Durations: formDurations, Duration: get("duration"),
		Extra: get("matchers"), Author: get("created_by"), Comment: get("comment")}
	if !slices.Contains(formDurations, d.Duration) {
		d.Duration = "2h"
	}
	for _, name := range formLabels {
		d.Labels = append(d.Labels, labelField{Name: name, Value: get(name)})
	}
	return d
}

func (h *Handler) newPage(w http.ResponseWriter, r *http.Request) {
	h.render(w, http.StatusOK, newTemplate, h.formData(r.URL.Query().Get))
}

// createForm creates a silence from the form and answers 303 to the list;
// a refusal renders the form again, filled in, with the reason.
func (h *Handler) createForm(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxBodyBytes)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "form: "+err.Error(), http.StatusBadRequest)
		return
	}
	data := h.formData(r.PostForm.Get)
	if code, msg := h.authorize(r.PostForm.Get("token")); code != 0 {
		data.Error = msg
		h.render(w, code, newTemplate, data)
		return
	}
	now := h.opts.Now()
	var matchers []string
	for _, l := range data.Labels {
		if l.Value == "" {
			continue
		}
		m, err := labels.NewMatcher(labels.MatchEqual, l.Name, l.Value)
		if err != nil {
			data.Error = err.Error()
			h.render(w, http.StatusBadRequest, newTemplate, data)
			return
		}
		matchers = append(matchers, m.String())
	}
	for line := range strings.Lines(data.Extra) {
		if line = strings.TrimSpace(line); line != "" {
			matchers = append(matchers, line)
		}
	}
	d, _ := time.ParseDuration(data.Duration) // one of formDurations
	st, err := h.opts.Store.Add(Silence{Matchers: matchers, EndsAt: now.Add(d), CreatedBy: data.Author, Comment: data.Comment}, now)
	if err != nil {
		if status(err) == http.StatusInternalServerError {
			h.opts.Logger.Error("changing silences failed", zap.Error(err))
		}
		data.Error = err.Error()
		h.render(w, status(err), newTemplate, data)
		return
	}
	h.opts.Logger.Info("silence created", zap.String("id", st.ID), zap.Strings("matchers", st.Matchers),
		zap.Time("ends_at", st.EndsAt), zap.String("created_by", st.CreatedBy))
	http.Redirect(w, r, h.opts.PathPrefix+"/silences", http.StatusSeeOther)
}

func (h *Handler) listPage(w http.ResponseWriter, _ *http.Request) {
	h.render(w, http.StatusOK, listTemplate, map[string]any{"Prefix": h.opts.PathPrefix, "Title": "Silences", "Silences": h.opts.Store.List(h.opts.Now())})
}

// expireForm expires a silence from the list page and answers 303 to it.
func (h *Handler) expireForm(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxBodyBytes)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "form: "+err.Error(), http.StatusBadRequest)
		return
	}
	now := h.opts.Now()
	fail := func(code int, msg string) {
		h.render(w, code, listTemplate, map[string]any{"Prefix": h.opts.PathPrefix, "Title": "Silences", "Error": msg, "Silences": h.opts.Store.List(now)})
	}
	if code, msg := h.authorize(r.PostForm.Get("token")); code != 0 {
		fail(code, msg)
		return
	}
	st, err := h.opts.Store.Expire(r.PathValue("id"), now)
	if err != nil {
		if status(err) == http.StatusInternalServerError {
			h.opts.Logger.Error("changing silences failed", zap.Error(err))
		}
		fail(status(err), err.Error())
		return
	}
	h.opts.Logger.Info("silence expired", zap.String("id", st.ID))
	http.Redirect(w, r, h.opts.PathPrefix+"/silences", http.StatusSeeOther)
}
