package scrape

import (
	"context"
	"fmt"
	"testing"
	"time"

	captures "github.com/sglang-watchdog/sglang-watchdog/internal/fixture"
)

// TestNormalizeRawMatchesScrape: samples that reach the watchdog through
// a Normalizer (a query API, a recording) become exactly the groups a
// scrape of the same exposition produces, for every captured release.
func TestNormalizeRawMatchesScrape(t *testing.T) {
	norm := NewNormalizer(0) // one normalizer across captures, as a reader reuses it
	for _, name := range captures.Names() {
		t.Run(name, func(t *testing.T) {
			body, err := captures.SGLang(name)
			if err != nil {
				t.Fatal(err)
			}
			srv := serve(t, body)
			target := Target{Name: "r", URL: srv.URL + "/metrics", Kind: KindEngine}
			scraped := ScrapeOnce(context.Background(), client(t), target, Options{})
			if scraped.Reason != "" {
				t.Fatalf("scrape failed: %s %s", scraped.Reason, scraped.Error)
			}
			raw, err := NewParser().Parse(nil, body)
			if err != nil {
				t.Fatal(err)
			}
			at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
			got := norm.Scrape(target, at, raw)
			if got.Reason != "" || !got.At.Equal(at) || got.Target != "r" || got.Kind != KindEngine {
				t.Fatalf("Normalizer.Scrape: reason %q at %v target %q kind %q", got.Reason, got.At, got.Target, got.Kind)
			}
			// Rendered, so NaN samples compare equal to NaN.
			if g, w := fmt.Sprintf("%+v", got.Groups), fmt.Sprintf("%+v", scraped.Groups); g != w {
				t.Errorf("Normalizer.Scrape groups differ from the scrape's (%d vs %d bytes rendered)", len(g), len(w))
			}
		})
	}
}

// TestNormalizeRawSeriesLimit: the series limit fails the scrape the way a
// scrape over the limit fails.
func TestNormalizeRawSeriesLimit(t *testing.T) {
	body, err := captures.SGLang("sglang-current-full.prom")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := NewParser().Parse(nil, body)
	if err != nil {
		t.Fatal(err)
	}
	got := NewNormalizer(3).Scrape(Target{Name: "r", Kind: KindEngine}, time.Unix(0, 0), raw)
	if got.Reason != "too_many_series" || got.Groups != nil {
		t.Errorf("over the limit: reason %q, %d groups; want too_many_series and none", got.Reason, len(got.Groups))
	}
}
