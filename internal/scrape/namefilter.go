package scrape

import (
	"net/url"
	"slices"
	"strings"
	"time"
)

// DefaultFilterRecheck is how long a target whose filtered answer was
// rejected is scraped in full before filtering is tried again.
const DefaultFilterRecheck = 10 * time.Minute

// Outcomes of a scrape's family filtering (watchdog_scrape_family_filter_total).
const (
	filterFiltered = "filtered" // a filtered answer, accepted
	filterFull     = "full"     // a full answer
	filterFallback = "fallback" // a filtered answer rejected, then a full one
)

// nameParam is the query parameter prometheus_client's exposition restricts
// its answer with: only samples whose names are given are rendered.
const nameParam = "name[]"

// familyFilter is one engine target's filtering state, owned by its loop:
// which sample names to ask for and whether the target's answers to that
// question can be trusted.
//
// prometheus_client matches name[] against sample names (a counter's
// _total, a histogram's _bucket, _sum and _count), so the names asked are
// the exposed sample names of kept families that the target's last full
// scrape showed, plus, for every kept engine family it did not show yet
// (a labelled family appears with its first child), each name SGLang may
// expose it under (legacy aliases too). An old prometheus_client in
// multiprocess mode answers a filtered request with nothing; a proxy may
// drop the query or reject its length: a filtered answer that lacks any
// name the last full scrape had is rejected, the target scraped in full
// and not filtered again for the recheck period.
type familyFilter struct {
	recheck time.Duration
	keep    keepSet
	aliases map[string]string
	// learned are the exposed names of kept samples in the last full
	// scrape that was learned from; a filtered answer must hold each.
	learned map[string]bool
	seen    map[string]bool // scratch of covers
	query   string          // the encoded name[] parameters
	// base and filtered: the last target URL asked and it with query.
	base, filtered string
	// until: no filtering before it; learn: the next full scrape at or
	// after it rebuilds learned and query.
	until   time.Time
	learn   bool
	outcome string // of the last scrape, for the loop's metrics
}

func newFamilyFilter(keep keepSet, recheck time.Duration) *familyFilter {
	return &familyFilter{recheck: recheck, keep: keep, aliases: legacyAliases(),
		learned: make(map[string]bool), seen: make(map[string]bool), learn: true}
}

// active reports whether the scrape at now asks for the learned names.
func (f *familyFilter) active(now time.Time) bool {
	return f != nil && !f.learn && len(f.learned) > 0 && !now.Before(f.until)
}

// url is rawURL with the name[] parameters added to its own query.
func (f *familyFilter) url(rawURL string) string {
	if f.base != rawURL || f.filtered == "" {
		sep := "?"
		if strings.Contains(rawURL, "?") {
			sep = "&"
		}
		f.base, f.filtered = rawURL, rawURL+sep+f.query
	}
	return f.filtered
}

// covers reports whether a filtered answer's kept samples hold every name
// the last full scrape had.
func (f *familyFilter) covers(raw []RawSample) bool {
	clear(f.seen)
	last := ""
	for _, r := range raw {
		if r.Name == last {
			continue
		}
		last = r.Name
		if f.learned[r.Name] {
			f.seen[r.Name] = true
		}
	}
	return len(f.seen) == len(f.learned)
}

// reject stops filtering until now plus the recheck period.
func (f *familyFilter) reject(now time.Time) {
	f.until, f.learn = now.Add(f.recheck), true
}

// wantsLearning reports whether a full scrape at now should rebuild the
// names asked.
func (f *familyFilter) wantsLearning(now time.Time) bool {
	return f != nil && f.learn && !now.Before(f.until)
}

// learnFrom rebuilds the names asked from a full scrape's kept samples.
func (f *familyFilter) learnFrom(raw []RawSample) {
	clear(f.learned)
	for _, r := range raw {
		f.learned[r.Name] = true
	}
	shown := make(map[string]bool, len(f.learned))
	names := make([]string, 0, len(f.learned)+4*len(f.keep))
	for n := range f.learned {
		names = append(names, n)
		shown[f.family(n)] = true
	}
	for _, fam := range f.engineFamilies() {
		if !shown[fam] {
			names = append(names, f.exposedNames(fam)...)
		}
	}
	slices.Sort(names)
	names = slices.Compact(names)
	q := make(url.Values, 1)
	q[nameParam] = names
	f.query, f.filtered, f.learn = q.Encode(), "", false
}

// family is the kept canonical family of an exposed sample name.
func (f *familyFilter) family(exposed string) string {
	c := resolveName(exposed, f.aliases).canonical
	if f.keep[c] {
		return c
	}
	for _, suf := range histogramSuffixes {
		if base, ok := strings.CutSuffix(c, suf); ok {
			return base
		}
	}
	return c
}

// engineFamilies are the kept families an SGLang engine exposes itself.
func (f *familyFilter) engineFamilies() []string {
	out := make([]string, 0, len(f.keep))
	for fam := range f.keep {
		if strings.HasPrefix(fam, enginePrefix) {
			out = append(out, fam)
		}
	}
	slices.Sort(out)
	return out
}

// exposedNames are the sample names prometheus_client may render family
// under: its canonical and legacy names, as a counter (already ending in
// _total), a gauge or a histogram.
func (f *familyFilter) exposedNames(family string) []string {
	forms := []string{family}
	for from, to := range f.aliases {
		if to == family && strings.HasPrefix(from, enginePrefix) {
			forms = append(forms, from)
		}
	}
	var out []string
	for _, n := range forms {
		out = append(out, n)
		if strings.HasSuffix(n, "_total") {
			continue
		}
		for _, suf := range histogramSuffixes {
			out = append(out, n+suf)
		}
	}
	return out
}
